"""What line capture (``record --coverage``) costs interpreted launches: the same launches recorded with and
without it, alternating, the medians of each kernel's launch time (warm: each is launched once untimed first).

Three shapes from tests/coverage_kernels.py: a 256-program launch the batched engine runs per program (its
programs disagree at a branch), a batched 256-program launch, and one program looping 256 times.

    python -m benchmarks.coverage_cost [rounds]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def workloads() -> dict[str, Callable[[], None]]:
    import torch

    from tests import coverage_kernels as ck

    def per_program() -> None:
        flags = (torch.arange(256) % 2).to(torch.int32)
        x = torch.arange(256 * 16.0)
        ck.value_branch[(256,)](x, flags, torch.zeros_like(x), BLOCK=16)

    def batched() -> None:
        x = torch.randn(1 << 16)
        ck.constexpr_branch[(256,)](x, torch.zeros_like(x), x.numel(), BLOCK=256, DOUBLE=True)

    def loop() -> None:
        ck.loop_sum[(1,)](torch.ones(1 << 14), torch.zeros(1), 1 << 14, BLOCK=64)

    return {
        "per-program, 256 programs": per_program,
        "batched, 256 programs": batched,
        "loop, 256 iterations": loop,
    }


def run(rounds: int = 7) -> dict[str, tuple[float, float]]:
    """Per workload: (median seconds without capture, with capture)."""
    import tilelens

    shapes = workloads()
    times: dict[tuple[str, bool], list[float]] = {(k, c): [] for k in shapes for c in (False, True)}
    for _ in range(rounds):
        for coverage in (False, True):
            with (
                tempfile.TemporaryDirectory() as d,
                tilelens.record(str(Path(d) / "h.db"), Path(d) / "b", coverage=coverage),
            ):
                for name, launch in shapes.items():
                    launch()
                    start = time.perf_counter()
                    launch()
                    times[(name, coverage)].append(time.perf_counter() - start)
    return {k: (statistics.median(times[(k, False)]), statistics.median(times[(k, True)])) for k in shapes}


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    print(f"Python {sys.version.split()[0]}, {rounds} rounds")
    for name, (plain, covered) in run(rounds).items():
        print(f"{name:28s} plain {plain:.3f} s  coverage {covered:.3f} s  ratio {covered / plain:.2f}")


if __name__ == "__main__":
    main()
