"""Where the launching thread's time goes inside TileLens's steady compiled launch, part by part (issue 15).

The H200's host is a virtual machine without hardware performance counters, and callgrind's model of it
ranks code changes but not their cost there (``benchmarks.launch_cost``). This runs a recorded step
(``backend="compiled"``, ``snapshots="none"``) with the profiling build of the compiled module
(``TILELENS_NATIVE_PROFILE=1``: time-stamp counter stamps around each part, ``native_common.h``'s ``Part``)
and reports, per launch, the ticks and nanoseconds each part took and how often it ran.

What it cannot show: the cost TileLens adds to the program's own code after it (caches and branch predictors
refilled), which on the H200 is as large as the direct cost; compare the bench's program-thread CPU per
launch with the sum here for that.

    python -m benchmarks.launch_parts                  # the GPU bench's launch-bound step (needs CUDA)
    python -m benchmarks.launch_parts --stand-in       # the CPU stand-in step (tilelens.core.native_training)
    [--steps N] [--json]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WARM_STEPS = 20


def _ticks_per_second(ticks: Callable[[], int]) -> float:
    t0, c0 = time.perf_counter(), ticks()
    time.sleep(0.2)
    return (ticks() - c0) / (time.perf_counter() - t0)


def measure(stand_in: bool, steps: int) -> dict[str, Any]:
    """Per part ``(ticks, calls)`` over ``steps`` recorded steps after :data:`WARM_STEPS`, the launches they
    made, and the counter's ticks per second. The environment must ask for the profiling build before the
    compiled module is first loaded (``main`` does)."""
    import tilelens
    from tilelens.core import native

    native.build()
    module = native.load()
    if module is None or native.profile() is None:
        raise RuntimeError(
            "no profile: the profiling build (x86-64 only) must be asked for with TILELENS_NATIVE_PROFILE=1"
            " before TileLens loads its module"
        )
    shared = False
    if stand_in:
        from tilelens.core.native_training import fake_runner, mm_like, rms_like, stand_in_step

        run, runner, sync = stand_in_step(), fake_runner, None
        shared = launcher_place(mm_like.fn) == launcher_place(rms_like)
    else:
        import torch

        from benchmarks.compiled_step import Step

        step = Step(2048, 1024, 2816, 32000, 8)
        run, runner, sync = step.run, None, torch.cuda.synchronize
        run()
    with tempfile.TemporaryDirectory(prefix="tilelens-launch-parts-") as name:
        folder = Path(name)
        options: dict[str, Any] = {"backend": "compiled", "snapshots": "none"}
        if runner is not None:
            options["runner"] = runner
        with tilelens.Recording(str(folder / "h.db"), folder / "b", **options) as rec:
            for _ in range(WARM_STEPS):
                run()
            if sync is not None:
                sync()
            native.profile(reset=True)
            for _ in range(steps):
                run()
            parts = native.profile(reset=True)
            if sync is not None:
                sync()
        # every step launches alike (tuning is done before the recording), and the launches' ids are known
        # once the recording has ended: the measured steps' share of them
        launches = len(rec.launch_ids) * steps // (WARM_STEPS + steps)
    return {
        "parts": parts,
        "launches": launches,
        "ticks_per_second": _ticks_per_second(module.ticks),
        "kernels_share_a_place": shared,
    }


def launcher_place(jit: Any) -> int:
    """The launcher's place for ``jit`` in its per-kernel caches (``address_slot<6>`` in native_common.h). Two
    kernels at one place (1 in 64, by their addresses) take turns there: each launch after the other kernel's
    finds its kernel's last template in place instead of among its kept ones."""
    return ((id(jit) * 0x9E3779B97F4A7C15) % 2**64) >> 58


def report(result: dict[str, Any]) -> str:
    launches, rate = result["launches"], result["ticks_per_second"]
    lines = [f"steady compiled launch, parts per launch ({launches} launches; counter {rate / 1e9:.2f} GHz):"]
    own = 0.0
    for name, (ticks, calls) in result["parts"].items():
        per = ticks / launches
        if name not in ("run", "tune_run"):  # Triton's own work, not TileLens's
            own += per
        lines.append(
            f"  {name:17} {calls / launches:5.2f} calls  {per:9.0f} ticks  {per / rate * 1e9:8.0f} ns"
        )
    lines.append(
        f"  TileLens's own parts (all but run, tune_run): {own:.0f} ticks, {own / rate * 1e9:.0f} ns a launch"
    )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    from tilelens.core import native

    os.environ[native.PROFILE_ENV] = "1"
    steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else 100
    result = measure("--stand-in" in argv, steps)
    print(json.dumps(result) if "--json" in argv else report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
