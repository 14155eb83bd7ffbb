"""Which part of a compiled recording's cost at the launch-bound step is whose (issue 15):
:func:`benchmarks.compiled_step.interleaved` under four variants, alternating.

* ``D`` (as recorded): the compiled launcher writes each batch of launches into the writer process's pipe
  itself, once full or once its oldest launch has waited half of ``writer_process.FEED_S`` (10 ms), and the
  feeder thread sends what else was queued; the writer process writes it into the history beside the program;
* ``X`` (fed, nothing written): the same feeding, to a writer process that reads every message and writes
  nothing (:func:`discarding_child`): the feeding and the pipe stay, the writer's SQL goes;
* ``F`` (fed late): every batch is queued (:func:`queued_only`) and the feeder wakes only every second
  (:func:`fed_late`), so during a round (~20 ms) nothing is sent or written; the flush before each untraced
  sample sends and writes it all, untimed;
* ``T`` (fed late, no autotuner frames): as ``F``, and autotuners' calls are not intercepted
  (:func:`no_tuner_interception`) nor their launches framed from the autotuner's own Python frame
  (:func:`intercepted_tuner`), so their launches carry no tuning key and no frame is made. Wrong records on
  purpose: for timing only.
* ``A`` (autotuner calls intercepted): as ``D``, with every autotuner call intercepted and framed by the
  compiled ``Tuner`` around Triton's ``Autotuner.run`` (:func:`intercepted_tuner`), as before the launches were
  framed from the autotuner's Python frame: ``A - D`` is what that saves.
* ``Q`` (queued): as ``D``, with every batch queued for the feeder (:func:`queued_only`), as before the
  launcher wrote its batches itself: ``Q - D`` is what that saves.

So ``D - X`` is about what the writer's SQL on another core costs the program, ``X - F`` what the feeding
costs (the feeder's wakeups, the child's reads; waking a quarter as often changed nothing measurable, and
part of both is what any busy process on another core costs: ``benchmarks.busy_neighbour``), ``F - T`` what
framing the autotuners' calls costs, and ``F`` the launching thread's own cost. Variants run alternately, ``reps`` times
each, so that the host's drift falls on all of them alike. Benchmark-only: each replacement is installed for
one estimate and undone after it, also on error.

    python -m benchmarks.cost_split [--rounds N] [--reps N] [--variants D,X,F,T,Q,A]   # needs CUDA
    python -m benchmarks.cost_split --stand-in ...                                  # the CPU stand-in step
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

VARIANTS = ("D", "X", "F", "T", "Q", "A")
LATE_FEED_S = 1.0


def fed_late() -> contextlib.AbstractContextManager[None]:
    """The feeder wakes every :data:`LATE_FEED_S` seconds instead of every ``FEED_S`` for the block (a
    flush still wakes it at once)."""
    from tilelens.core import writer_process as wp
    from tilelens.core.interpreter import attribute_replaced

    return attribute_replaced(wp, "FEED_S", LATE_FEED_S)


@contextlib.contextmanager
def discarding_child() -> Iterator[None]:
    """Recordings begun in the block get a writer process of their own that reads every message and writes
    nothing (``python -m benchmarks.cost_split --child``); it ends with the block."""
    from tilelens.core import writer_process as wp
    from tilelens.core.interpreter import attribute_replaced

    started: list[subprocess.Popen[bytes]] = []

    def child() -> subprocess.Popen[bytes]:
        if started and started[-1].poll() is None:
            return started[-1]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "benchmarks.cost_split", "--child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                close_fds=True,
            )
        )
        return started[-1]

    try:
        with attribute_replaced(wp, "_writer_process", child):
            yield
    finally:
        for process in started:
            assert process.stdin is not None and process.stdout is not None
            with contextlib.suppress(OSError):
                process.stdin.close()
            process.wait(timeout=30)
            process.stdout.close()


def no_tuner_interception() -> contextlib.AbstractContextManager[None]:
    """Recordings (and pauses' ends) in the block intercept every kind of call but autotuners' (their
    ``run`` stays Triton's): the JITFunction launch an autotuner makes reaches TileLens without a frame."""
    from tilelens.core import compat, interpreter

    original = interpreter._Patcher.set

    def set_unless_tuner(patcher: Any, owner: Any, name: str, value: Any) -> None:
        if owner is compat.Autotuner and name == "run":
            return
        original(patcher, owner, name, value)

    return interpreter.attribute_replaced(interpreter._Patcher, "set", set_unless_tuner)


def intercepted_tuner() -> contextlib.AbstractContextManager[None]:
    """Recordings begun in the block intercept every autotuner call and frame it in the compiled ``Tuner``
    (``compiled_native.CALLER_FRAMES`` off) instead of framing its launch from its Python frame."""
    from tilelens.core import compiled_native
    from tilelens.core.interpreter import attribute_replaced

    return attribute_replaced(compiled_native, "CALLER_FRAMES", False)


def queued_only() -> contextlib.AbstractContextManager[None]:
    """Recordings begun in the block queue every batch for the feeder (``writer_process.DIRECT_SEND`` off),
    as they did before the launcher wrote its batches into the pipe itself."""
    from tilelens.core import writer_process as wp
    from tilelens.core.interpreter import attribute_replaced

    return attribute_replaced(wp, "DIRECT_SEND", False)


def child_main() -> int:
    """The discarding writer process: answers every flush and the end with a report of nothing written."""
    from tilelens.core.writer_child import frame, read_frame

    stdin = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    next_seq = 0
    while (message := read_frame(stdin)) is not None:
        for item in message:
            if type(item) is not tuple or not item:
                continue
            if item[0] == "o":
                next_seq = item[4]
            elif item[0] in ("f", "x"):
                report = {"written": [], "events": 0, "failed": 0, "failure": None, "next_seq": next_seq}
                out.write(frame(report))
                out.flush()
    return 0


@contextlib.contextmanager
def _variant(name: str) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        if name == "X":
            stack.enter_context(discarding_child())
        if name in ("F", "T"):
            stack.enter_context(fed_late())
        if name in ("F", "T", "Q"):
            stack.enter_context(queued_only())
        if name == "T":
            stack.enter_context(no_tuner_interception())
        if name in ("T", "A"):
            stack.enter_context(intercepted_tuner())
        yield


def run(
    step: Callable[[], Any],
    launches_per_step: int,
    *,
    sync: Callable[[], Any],
    rounds: int | None = None,
    reps: int = 4,
    variants: tuple[str, ...] = VARIANTS,
    steps: int = 4,
    lead: int = 4,
) -> dict[str, list[dict[str, Any]]]:
    """``interleaved``'s figures per variant, ``reps`` of each, the variants alternating (``rounds``: the
    bench's ``INTERLEAVED_ROUNDS`` when None)."""
    from benchmarks.compiled_step import INTERLEAVED_ROUNDS, interleaved

    rounds = INTERLEAVED_ROUNDS if rounds is None else rounds

    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise ValueError(f"variants are {', '.join(VARIANTS)}, not {', '.join(sorted(unknown))}")
    out: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for _ in range(reps):
        for name in variants:
            with tempfile.TemporaryDirectory(prefix="tilelens-cost-split-") as folder, _variant(name):
                got = interleaved(
                    step, launches_per_step, Path(folder), sync=sync, rounds=rounds, steps=steps, lead=lead
                )
            out[name].append(got)
    return out


def report(results: dict[str, list[dict[str, Any]]]) -> str:
    """A line per variant: each run's ratio with its 95 % interval, and the program thread's added CPU."""
    lines = []
    for name, runs in results.items():
        ratios = ", ".join(
            f"{r['interleaved_ratio']:.3f} ({r['interleaved_ratio_low']:.3f}-{r['interleaved_ratio_high']:.3f})"
            for r in runs
        )
        cpu = ", ".join(f"{r['interleaved_cpu_extra_us_per_launch']:+.1f}" for r in runs)
        wakes = ", ".join(str(r["interleaved_feeder_wakes"]) for r in runs)
        lines.append(
            f"  {name}: ratio {ratios}; program thread CPU added (us a launch) {cpu}; feeder wakes in the timed"
            f" samples {wakes}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import argparse

    if argv == ["--child"]:
        return child_main()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cost_split")
    parser.add_argument("--stand-in", action="store_true", help="the CPU stand-in step (no GPU)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds per estimate (default: the bench's, 480)"
    )
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args(argv)
    variants = tuple(v for v in args.variants.split(",") if v)
    with contextlib.ExitStack() as stack:
        if args.stand_in:
            from tilelens.core.native_training import LAUNCHES_PER_STEP, stand_in_step, stand_in_triton_run

            stack.enter_context(stand_in_triton_run())
            step, per_step, sync = stand_in_step(), LAUNCHES_PER_STEP, lambda: None
        else:
            import torch

            from benchmarks.compiled_step import warmed_launch_bound_step

            bench_step = warmed_launch_bound_step()
            step, per_step, sync = bench_step.run, bench_step.launches, torch.cuda.synchronize
        results = run(step, per_step, sync=sync, rounds=args.rounds, reps=args.reps, variants=variants)
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
