#!/usr/bin/env python3
"""What the out-of-bounds guard costs: recording time of the seed workloads with the guard on and off.

    python scripts/bench_oob.py                  # quick shapes, 15 interleaved samples per variant
    python scripts/bench_oob.py --samples 30 --only gemm,gemm_oob

Both variants run in this one process, interleaved sample by sample, so machine drift lands on both. "off"
records exactly as "on" does except that the guard never sees the arguments' storages (no stray-lane check,
nothing masked off). Times are this thread's CPU time (``time.thread_time``): on a busy shared machine wall
time mostly measures the neighbours. Two estimates of the guard's cost: the ratio of the minimum times, and
the median of the per-sample ratios (each "on" run against the "off" run right beside it).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@contextlib.contextmanager
def guard_off():
    """Record with the storages unknown to the guard (what recording cost before the guard existed)."""
    from tilelens.core.interpreted import launch

    original = launch.host_spans

    def without_storage(*args, **kwargs):
        spans = original(*args, **kwargs)
        spans.storage = None
        return spans

    launch.host_spans = without_storage
    try:
        yield
    finally:
        launch.host_spans = original


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=15)
    p.add_argument("--only", default="", help="comma-separated workload names")
    args = p.parse_args(argv)

    import torch

    import tilelens
    from benchmarks.workloads import all_cases

    torch.set_num_threads(1)
    cases = all_cases(quick=True)
    if args.only:
        cases = [c for c in cases if c.workload in set(args.only.split(","))]
    import statistics

    print(
        "| workload | shape | guard off (min CPU s) | guard on (min CPU s) | cost (min) | cost (paired median) |"
    )
    print("|---|---|---|---|---|---|")
    ratios, paired_all = [], []
    with (
        tempfile.TemporaryDirectory(prefix="tilelens-bench-oob-") as tmp,
        tilelens.record(str(Path(tmp) / "h.db")),
    ):
        for case in cases:
            case.run()  # warm: imports, traced copies, first-launch costs
            best = {"off": float("inf"), "on": float("inf")}
            paired = []
            for i in range(args.samples):
                took = {}
                for variant in ("off", "on") if i % 2 == 0 else ("on", "off"):
                    with guard_off() if variant == "off" else contextlib.nullcontext():
                        t0 = time.thread_time()
                        case.run()
                        took[variant] = time.thread_time() - t0
                    best[variant] = min(best[variant], took[variant])
                paired.append(took["on"] / took["off"])
            ratio = best["on"] / best["off"]
            ratios.append(ratio)
            paired_all.append(statistics.median(paired))
            print(
                f"| {case.workload} | {case.shape} | {best['off']:.4f} | {best['on']:.4f} | "
                f"{ratio - 1:+.1%} | {paired_all[-1] - 1:+.1%} |",
                flush=True,
            )
    print(
        f"\ncost over workloads: median {statistics.median(ratios) - 1:+.1%} (min times), "
        f"{statistics.median(paired_all) - 1:+.1%} (paired); max {max(ratios) - 1:+.1%} / "
        f"{max(paired_all) - 1:+.1%} (target <= +3%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
