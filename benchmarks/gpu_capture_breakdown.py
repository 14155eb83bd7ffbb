"""Where a compiled recording's launching thread spends its time on a real GPU step (issue 15).

The same staged cut as ``benchmarks.capture_overhead --breakdown``, but with Triton's real compiled launches
and the multi-kernel step of ``benchmarks.compiled_step`` at its default shape: each stage cuts one more part
of the router off and reports the wall time and the program thread's CPU time per launch (best of
``samples``). Then a profile of the recorded loop and the cost of single tensor reads on CUDA tensors.
Benchmark-only monkeypatching of TileLens's router.

    python -m benchmarks.gpu_capture_breakdown [steps]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import torch


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _measure(fn: Any, steps: int, samples: int) -> tuple[float, float]:
    """Best (wall, thread CPU) seconds of ``steps`` calls of ``fn``, the GPU drained before and after."""
    best_wall = best_cpu = float("inf")
    for _ in range(samples):
        _sync()
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            fn()
        cpu = time.thread_time() - c0
        _sync()
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, cpu)
    return best_wall, best_cpu


def stand_in() -> tuple[Any, Any]:
    """The CPU stand-in of ``benchmarks.capture_overhead``: a step of five launches and a fake runner."""
    from benchmarks import capture_overhead as co

    return co.stand_in_step(), co.fake_runner


def run(steps: int = 20, samples: int = 5, cpu: bool = False) -> list[tuple[str, float, float]]:
    """``cpu``: the stand-in step and runner instead of the GPU step (no untraced variants then)."""
    import gc

    import tilelens
    from tilelens.core import compiled as C

    runner: Any = None
    if cpu:
        run_step, runner = stand_in()
    else:
        from benchmarks.compiled_step import Step

        run_step = Step(2048, 1024, 2816, 32000, 8).run
    extra = {} if runner is None else {"runner": runner}
    if not cpu:
        run_step()
        _sync()
    folder = Path(tempfile.mkdtemp(prefix="tilelens-gpu-breakdown-"))
    with tilelens.Recording(
        str(folder / "n.db"), folder / "n", backend="compiled", snapshots="none", **extra
    ) as rec:
        run_step()
    launches = len(rec.launch_ids)  # per step
    print(f"  {launches} launches per step, {steps} steps per sample, {samples} rounds", flush=True)
    print(f"  compiled capture (tilelens.core.native): {'yes' if rec._compiled.native_capture else 'no'}")
    Router = C.CompiledRouter
    saved = {name: getattr(Router, name) for name in ("launch", "tune", "_launch_unsnapshotted")}

    def bare(self: Any, jit: Any, args: Any, kwargs: Any) -> Any:
        grid = kwargs.pop("grid", None)
        kwargs.pop("warmup", None)
        return self.runner(jit, args, grid, kwargs)

    def no_capture(self: Any, k: Any, jit: Any, args: Any, grid: Any, kwargs: Any, stack: Any) -> Any:
        return self.runner(jit, args, grid, kwargs)

    def plain_tune(self: Any, tuner: Any, args: Any, kwargs: Any) -> Any:
        return self._original(C.compat.Autotuner)(tuner, *args, **kwargs)

    def no_queue(router: Any) -> None:
        router.submit = lambda k, raw: 0
        if router.flat is not None:
            router.flat = lambda *a: 0

    def nothing_sent(router: Any) -> None:
        """The launches are marshalled and queued as usual, but the feeder drops them: the writer process
        stays idle (what its CPU use, on another core, costs the program's)."""
        writer = router.sink._writer
        send = writer._send
        writer._send = lambda items: send([item for item in items if type(item) is not bytes])

    memo: dict[int, Any] = {}

    def memoised_capture(plan: Any, bound: dict[str, Any], last: Any = None) -> Any:
        """The first launch's capture of each kernel, again: what the rest costs without reading arguments."""
        got = memo.get(id(plan))
        if got is None:
            got = memo[id(plan)] = capture(plan, bound)
        return got

    def python_capture(router: Any) -> None:
        router._capture = capture

    def no_launcher(router: Any) -> None:
        """The compiled capture, but every launch through the Python router (no compiled launcher)."""
        if router._launcher is not None:
            router._launcher.configure()

    from tilelens.core.compiled_templates import capture

    # label -> (router class patches, change to the router, interception left installed); a label with
    # "gc off" runs with the garbage collector disabled.
    variants: dict[str, tuple[dict[str, Any], Any, bool]] = {
        "recorded (snapshots=none)": ({}, None, True),
        "recorded, gc off": ({}, None, True),
        "recorded, without the compiled launcher": ({}, no_launcher, True),
        "recorded, Python capture (not the compiled one)": ({}, python_capture, True),
        "recorded, arguments not read (capture memoised)": (
            {},
            lambda r: setattr(r, "_capture", memoised_capture),
            True,
        ),
        "recorded, nothing queued": ({}, no_queue, True),
        "recorded, queued but not sent (writer process idle)": ({}, nothing_sent, True),
        "recorded, raw launches (no templates)": ({}, lambda r: setattr(r, "flat", None), True),
        "  ... up to the launch only (no capture)": ({"_launch_unsnapshotted": no_capture}, None, True),
        "  ... interception and autotune frames only": ({"launch": bare}, None, True),
        "  ... interception only": ({"launch": bare, "tune": plain_tune}, None, True),
        "recording entered, interception removed": ({}, None, False),
    }
    results: dict[str, list[tuple[float, float]]] = {
        "untraced": [],
        "untraced, gc off": [],
        "untraced, another core busy": [],
    }
    results.update({label: [] for label in variants})
    jit_run = C.compat.JITFunction.run
    for i in range(samples):
        if cpu:  # Triton's layers with the stand-in as the compiled launch
            from benchmarks.capture_overhead import _untraced_run

            C.compat.JITFunction.run = _untraced_run
        try:
            results["untraced"].append(_measure(run_step, steps, 1))
            gc.disable()
            results["untraced, gc off"].append(_measure(run_step, steps, 1))
            gc.enable()
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                time.sleep(0.05)
                results["untraced, another core busy"].append(_measure(run_step, steps, 1))
            finally:
                busy.kill()
                busy.wait()
        finally:
            C.compat.JITFunction.run = jit_run
        for label, (patches, change, intercept) in variants.items():
            for name, fn in patches.items():
                setattr(Router, name, fn)
            try:
                tag = f"v{i}-{len(results[label])}-{abs(hash(label))}"
                with tilelens.Recording(
                    str(folder / f"{tag}.db"), folder / tag, backend="compiled", snapshots="none", **extra
                ) as rec:
                    router = rec._compiled
                    assert router is not None
                    if change is not None:
                        change(router)
                        if change is not no_launcher:
                            router._configure_launcher()  # the compiled launcher sees what changed
                    if patches and router._launcher is not None:
                        router._launcher.configure()  # the router's patched Python decides every launch
                    if "tune" in patches and router._tuner is not None:
                        router._tuner.configure()  # and its patched tune frames every autotuner call
                    if not intercept:
                        rec._patches.__exit__(None, None, None)
                        rec._patches = _Nothing()
                        if cpu:
                            from benchmarks.capture_overhead import _untraced_run

                            C.compat.JITFunction.run = _untraced_run
                    run_step()
                    if "gc off" in label:
                        gc.disable()
                    results[label].append(_measure(run_step, steps, 1))
                    gc.enable()
            finally:
                C.compat.JITFunction.run = jit_run
                for name, fn in saved.items():
                    setattr(Router, name, fn)
    rows: list[tuple[str, float, float]] = []
    n = steps * launches
    for label, got in results.items():
        walls = sorted(w / n * 1e6 for w, _ in got)
        cpus = sorted(c / n * 1e6 for _, c in got)
        rows.append((label, walls[0], cpus[0]))
        print(
            f"  {label:46s} wall min {walls[0]:6.1f} median {walls[len(walls) // 2]:6.1f} us/launch;"
            f" thread CPU min {cpus[0]:6.1f}",
            flush=True,
        )

    if cpu:
        return rows
    # A profile of the full recorded loop: which functions the launching thread runs, by own time.
    with tilelens.Recording(str(folder / "p.db"), folder / "p", backend="compiled", snapshots="none"):
        run_step()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(steps):
            run_step()
        prof.disable()
        torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(45)
    print(text.getvalue()[:9000], flush=True)

    t = torch.empty(64, 64, device="cuda")
    reads = {
        "t.untyped_storage()": lambda: t.untyped_storage(),
        "t.data_ptr()": lambda: t.data_ptr(),
        "t.storage_offset()": lambda: t.storage_offset(),
        "t.dtype": lambda: t.dtype,
        "t.shape": lambda: t.shape,
        "t.stride()": lambda: t.stride(),
        "t.device": lambda: t.device,
        "time.time()": time.time,
        "time.perf_counter()": time.perf_counter,
    }
    for label, fn in reads.items():
        per = min(timeit.repeat(fn, number=100_000, repeat=3)) / 100_000 * 1e9
        print(f"  {label:24s} {per:7.0f} ns", flush=True)
    return rows


class _Nothing:
    """Stands in for interception patches already removed."""

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    run(int(args[0]) if args else 20, cpu="--cpu" in sys.argv)
