"""How fast the writer process writes a compiled recording's launches, measured without a GPU.

A launch-bound program launches every ~60 µs on the H200 host. The writer process must write faster than that
or its queue fills, and past ``writer_process.QUEUE_SIZE`` launches the program runs at the writer's speed.
This records ``launches`` launches through the writer process, keeps the messages the program sent it, and writes
them again in this process into a fresh history, in the child's batches (``RawWriter.handle``), two ways:

* rows from templates (``tilelens.store.write.templated_rows``), what the child does after a template's first launch;
* the usual rows (every launch built into a ``LaunchRecord`` and written by ``History.write_launches``).

Reported per launch: wall and CPU time, and the SQLite statements' own share of the template path.

The launches are one of two steps' (``--step``):

* ``stand-in`` (the default): ``benchmarks.standin``'s step, four launches of an autotuned kernel and
  one plain launch, ~7 argument rows a launch;
* ``bench``: the GPU bench's own step (``benchmarks.compiled_step.Step``: Liger RMSNorm, SwiGLU and cross
  entropy, the autotuned bf16 matmul) on small CPU tensors, its launches reaching a stand-in for Triton's run
  (:func:`bench_step_on_cpu`): the writer's work for the launch mix the H200 figures are of, 10.6 argument rows
  a launch at 8 layers (RMSNorm's 14, the matmul's 10, SwiGLU's 7, the cross entropy's 28), without a GPU.
  Needs ``liger-kernel``.

    python -m benchmarks.writer_throughput [launches] [--step stand-in|bench]
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BATCH = 256  # launches per message: ~10 ms (``writer_process.FEED_S``) of a launch-bound program
STEPS = ("stand-in", "bench")


@contextlib.contextmanager
def bench_step_on_cpu(layers: int = 8) -> Iterator[tuple[Callable[[], Any], int]]:
    """The GPU bench's step and its launches per step (``5 * layers + 2``: a layer's five, then the vocabulary's
    matmul and the cross entropy), runnable on the CPU for the block: small CPU tensors, ``JITFunction.run``
    replaced by ``benchmarks.standin``'s stand-in (TileLens's router calls it as it calls Triton's run), and the matmul's autotuner benchmarking through a stand-in that times every config alike (Triton
    keeps the first). The autotuner tunes at the step's first call: call it once before recording, as the GPU
    bench warms up. Both replacements are undone after the block, also on error."""
    import inspect

    from benchmarks.standin import stand_in_triton_run
    from tilelens.core.patches import attribute_replaced

    _import_compiled_mode()
    from benchmarks.compiled_step import Step, bf16_matmul_kernel

    def same_time(kernel_call: Any, quantiles: Any) -> list[float]:
        return [1.0] * len(quantiles)

    # The autotuner's ``do_bench`` is a cached property of ``_do_bench`` (Triton 3.8): the instance's own
    # attribute stands in front of it, cached or not, and its removal afterwards uncovers what was there. A
    # plain property cannot be set: then ``_do_bench``, which it returns.
    static = inspect.getattr_static(type(bf16_matmul_kernel), "do_bench", None)
    name = "_do_bench" if isinstance(static, property) else "do_bench"
    step = Step(256, 128, 256, 512, layers, device="cpu")
    with stand_in_triton_run(), attribute_replaced(bf16_matmul_kernel, name, same_time):
        yield step.run, step.launches


_BENCH_MODULES = (
    "benchmarks.compiled_step",
    "liger_kernel.ops.rms_norm",
    "liger_kernel.ops.swiglu",
    "liger_kernel.ops.cross_entropy",
)


def _import_compiled_mode() -> None:
    """Import the bench step's kernel modules as Triton's compiled mode decorates them, also where
    ``TRITON_INTERPRET=1`` is set (Triton decides at decoration: an interpreted kernel would not reach the
    stand-in for ``JITFunction.run``). A module imported earlier in this process keeps its kernels: one
    imported interpreted is refused, naming it."""
    import importlib

    from triton import knobs

    from tilelens.core import compat

    with knobs.runtime.scope():
        knobs.runtime.interpret = False
        modules = [importlib.import_module(name) for name in _BENCH_MODULES]
    for module in modules:
        for value in vars(module).values():
            kernel = value if isinstance(value, compat.InterpretedFunction) else getattr(value, "fn", None)
            if isinstance(kernel, compat.InterpretedFunction):  # a kernel, or an autotuner's
                raise RuntimeError(
                    f"{module.__name__} was imported under TRITON_INTERPRET=1: its kernels are interpreted, "
                    "so the bench step cannot run on the stand-in; run it in a process without that variable"
                )


def sent_items(launches: int, folder: Path, step: str = "stand-in") -> list[Any]:
    """What a recording of about ``launches`` launches of ``step`` (one of :data:`STEPS`) sent its writer
    process: kernels, templates, launches."""
    import marshal

    import tilelens
    from benchmarks import standin
    from tilelens.core.compiled.writer import process as wp
    from tilelens.core.patches import attribute_replaced

    if step not in STEPS:
        raise ValueError(f"step must be one of {', '.join(STEPS)}, not {step!r}")
    sent: list[Any] = []
    send = wp.ProcessWriter._send

    def keep(self: Any, items: list[Any]) -> None:
        sent.extend(items)
        send(self, items)

    with contextlib.ExitStack() as stack:
        if step == "bench":
            run_step, per_step = stack.enter_context(bench_step_on_cpu())
            run_step()  # tunes the matmul's autotuner, unrecorded
            runner: Any = None  # the default: Triton's run, here the stand-in
        else:
            run_step, per_step, runner = standin.stand_in_step(), 5, standin.fake_runner
        stack.enter_context(attribute_replaced(wp.ProcessWriter, "_send", keep))
        with tilelens.Recording(
            str(folder / "sent.db"),
            folder / "sent",
            backend="compiled",
            snapshots="none",
            **({} if runner is None else {"runner": runner}),
        ):
            for _ in range(max(1, launches // per_step)):
                run_step()
    items = [marshal.loads(i) if type(i) is bytes else i for i in sent]  # as the child reads them
    return [i for i in items if i[0] not in ("o", "f", "x")]


@contextlib.contextmanager
def warmed_writer(items: list[Any], folder: Path, name: str) -> Iterator[Any]:
    """A ``RawWriter`` on a fresh history ``name`` in ``folder`` that has written the first batch of ``items``
    (the kernels, each template's first launch: what the child writes before any template's rows are known)."""
    from tilelens.config import Location
    from tilelens.core.compiled.writer.child import RawWriter
    from tilelens.records import RunInfo
    from tilelens.store import History

    with History.open(location=Location(f"sqlite:///{folder / name}.db", folder / name)) as history:
        run = history.begin_run(
            RunInfo(argv=["writer_throughput"], cwd=str(folder), host="bench", versions={})
        )
        writer = RawWriter(history, run, 0)
        writer.handle(items[:BATCH])
        yield writer


def write(items: list[Any], folder: Path, name: str, templates: bool) -> dict[str, float]:
    """Write ``items`` as the writer process does; seconds per launch after the first batch (templates' first
    launches, the kernel rows)."""
    with warmed_writer(items, folder, name) as writer:
        if not templates:
            writer.rows = {number: None for number in writer.templates}  # every template the usual way
        rest = items[BATCH:]
        before = writer.from_templates
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(0, len(rest), BATCH):
            writer.handle(rest[i : i + BATCH])
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert writer.failed == 0, writer.failure
        n = sum(1 for item in rest if item[0] in ("m", "l"))
        return {
            "launches": n,
            "wall_us": wall / n * 1e6,
            "cpu_us": cpu / n * 1e6,
            "from_templates": writer.from_templates - before,
        }


def sql_share(items: list[Any], folder: Path) -> float:
    """Seconds per launch the template path's SQLite statements take on their own (rows built beforehand)."""
    with warmed_writer(items, folder, "sql") as writer:
        launches = [i for i in items[BATCH:] if i[0] == "m" and writer.rows.get(i[2]) is not None]
        created = next(iter(writer.rows.values())).created_param()
        per_template: dict[Any, tuple[list[Any], list[Any]]] = {}
        for k, item in enumerate(launches):
            t = writer.rows[item[2]]
            rows, args = per_template.setdefault(t, ([], []))
            rows.append(t.launch_varying(10**6 + k, 10**6 + k, item[5], item[3], item[4], created))
            if t.args is not None:
                args.append(t.arg_varying(10**6 + k, item[6]))
        raw = writer.history.cursor_writer.engine.raw_connection()
        try:
            cur = raw.driver_connection.cursor()
            t0 = time.perf_counter()
            cur.execute("BEGIN IMMEDIATE")
            for t, (rows, args) in per_template.items():
                t.launch.insert_all(cur, rows)  # as ``write_templated`` inserts them
                if args:
                    t.args.insert_all(cur, args)
            cur.execute("COMMIT")
            return (time.perf_counter() - t0) / len(launches)
        finally:
            raw.close()


def run(launches: int = 4000, step: str = "stand-in") -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="tilelens-writer-bench-"))
    items = sent_items(launches, folder, step)
    out: dict[str, Any] = {
        "step": step,
        "arg_rows": arg_rows(items),
        "templated": write(items, folder, "templated", templates=True),
        "usual": write(items, folder, "usual", templates=False),
        "sql_us": sql_share(items, folder) * 1e6,
    }
    return out


def arg_rows(items: list[Any]) -> float:
    """Argument rows a launch among ``items``' launches: each launch writes one per parameter of its kernel."""
    params = {item[1]: len(item[-1]) for item in items if item[0] == "k"}
    templates = {item[1]: params[item[2]] for item in items if item[0] == "t"}
    rows = [
        templates[item[2]] if item[0] == "m" else params[item[2]] for item in items if item[0] in ("m", "l")
    ]
    return sum(rows) / len(rows)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.writer_throughput")
    parser.add_argument("launches", nargs="?", type=int, default=4000)
    parser.add_argument("--step", choices=STEPS, default="stand-in")
    args = parser.parse_args(argv)
    got = run(args.launches, args.step)
    print(f"  step {got['step']}: {got['arg_rows']:.1f} argument rows a launch")
    for label in ("templated", "usual"):
        r = got[label]
        print(
            f"  {label:9s} {r['wall_us']:6.1f} us/launch wall, {r['cpu_us']:6.1f} CPU "
            f"({r['launches']} launches, {r['from_templates']} from template rows)"
        )
    print(f"  SQLite statements alone (template path): {got['sql_us']:.1f} us/launch")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
