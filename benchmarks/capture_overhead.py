"""CPU-side cost of recording one compiled launch, measured without a GPU.

A fake compiled kernel stands in for ``compat.run_compiled``: it does nothing and returns a
``CompiledKernel`` look-alike, so what is timed is TileLens's own path: interception, the router's capture on
the program's thread, and the background writer. Reported per launch: untraced (the fake called directly),
recorded up to the end of the loop (what the program waits for; the program thread's own CPU time
separately: the rest is the writer holding the GIL), and recorded including the writer's drain.

    python -m benchmarks.capture_overhead [launches]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.standin import fake_runner, stand_in_step
from benchmarks.standin import stand_in_triton_run as untraced_launches


def run(launches: int = 4000) -> dict[str, float]:
    """Launches alternate as in the GPU benchmark's step: four of an autotuned kernel, one plain."""
    import tilelens

    step = stand_in_step()

    launches -= launches % 5
    # Untraced: Triton's own layers (the autotuner's cache lookup, the grid lambda) with the stand-in as the
    # compiled launch.
    with untraced_launches():
        step()
        t0 = time.perf_counter()
        for _ in range(launches // 5):
            step()
        untraced = time.perf_counter() - t0
    folder = Path(tempfile.mkdtemp(prefix="tilelens-capture-bench-"))
    rec = tilelens.Recording(
        str(folder / "h.db"), folder / "b", backend="compiled", snapshots="none", runner=fake_runner
    )
    with rec:
        step()  # first launch: kernel identity, writer start
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(launches // 5):
            step()
        loop, cpu = time.perf_counter() - t0, time.thread_time() - c0
    drained = time.perf_counter() - t0
    assert len(rec.launch_ids) == launches + 5, len(rec.launch_ids)
    return {
        "launches": launches,
        "untraced_us": untraced / launches * 1e6,
        "recorded_loop_us": loop / launches * 1e6,
        "program_thread_cpu_us": cpu / launches * 1e6,
        "recorded_with_drain_us": drained / launches * 1e6,
    }


def breakdown(launches: int = 3000) -> list[tuple[str, float]]:
    """Where the launch thread's time goes: the recorded loop with stages of the router cut off one by one
    (program-thread CPU µs per launch, best of 3). Benchmark-only monkeypatching of TileLens's router."""
    import tilelens
    from tilelens.core.compiled import router as C

    step = stand_in_step()

    out: list[tuple[str, float]] = []

    def measure(label: str) -> None:
        step()
        best = float("inf")
        for _ in range(3):
            c0 = time.thread_time()
            for _ in range(launches // 5):
                step()
            best = min(best, (time.thread_time() - c0) / launches * 1e6)
        out.append((label, best))

    with untraced_launches():
        measure("untraced (Triton's layers, stand-in launch)")
    folder = Path(tempfile.mkdtemp(prefix="tilelens-capture-bench-"))
    Router = C.CompiledRouter
    saved = {name: getattr(Router, name) for name in ("launch", "tune", "_launch_unsnapshotted")}

    def recorded(label: str, tag: str, queue: bool = True) -> None:
        # A fresh recording per stage: interception binds the router's methods when the recording begins.
        rec = tilelens.Recording(
            str(folder / f"{tag}.db"), folder / tag, backend="compiled", snapshots="none", runner=fake_runner
        )
        with rec:
            router = rec._compiled
            assert router is not None
            if not queue:
                router.submit = lambda k, raw: 0
            measure(label)

    try:
        recorded("recorded", "a")
        recorded("recorded, nothing queued", "b", queue=False)
        Router._launch_unsnapshotted = (  # type: ignore[method-assign]
            lambda self, k, jit, args, grid, kwargs, stack: self.runner(jit, args, grid, kwargs)
        )
        recorded("  ... up to the launch only (no capture)", "c")

        def bare(self: Any, jit: Any, args: Any, kwargs: Any) -> Any:
            grid = kwargs.pop("grid", None)
            kwargs.pop("warmup", None)
            return self.runner(jit, args, grid, kwargs)

        Router.launch = bare  # type: ignore[method-assign]
        recorded("  ... interception and autotune frames only", "d")
        Router.tune = (  # type: ignore[method-assign]
            lambda self, tuner, args, kwargs: self._original(C.compat.Autotuner)(tuner, *args, **kwargs)
        )
        recorded("  ... interception only", "e")
    finally:
        for name, fn in saved.items():
            setattr(Router, name, fn)
    return out


if __name__ == "__main__":
    if "--breakdown" in sys.argv:
        for label, us in breakdown():
            print(f"  {label:48s} {us:6.1f} us/launch")
        sys.exit(0)
    r = run(int(sys.argv[1]) if len(sys.argv) > 1 else 4000)
    print(
        f"{r['launches']} launches: untraced (stand-in compiled call) {r['untraced_us']:.2f} us; recorded: program loop "
        f"{r['recorded_loop_us']:.1f} us/launch (program thread's own CPU {r['program_thread_cpu_us']:.1f} us), with writer drain {r['recorded_with_drain_us']:.1f} us/launch"
    )
