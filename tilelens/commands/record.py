"""``tilelens record SCRIPT [ARGS...]`` / ``tilelens record -m MODULE [ARGS...]``: run a program, record its launches.

The program runs in this process as ``python`` would run it (see :mod:`tilelens.runner`); its output passes
through untouched and its exit status becomes TileLens's. TileLens's own words (a live status line on a
terminal, the summary at the end) go to stderr, so a program's stdout stays exactly its own.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import TYPE_CHECKING, Any

import typer

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import state
from tilelens.commands.escape import escape

if TYPE_CHECKING:
    from tilelens.api import Recording

HELP = (
    "Run a Python program as `python` would and record every Triton kernel launch it makes.\n\n"
    "Everything after SCRIPT (or after -m MODULE) goes to the program untouched. The program's "
    "output passes through, and its exit status is this command's. At the end a summary (run id, "
    "launches per kernel, errors, out-of-bounds lanes, where the history is) is printed on stderr. "
    "SIGTERM or SIGHUP end the program as they would, once the run is marked terminated.\n\n"
    "Examples:\n\n"
    "  tilelens record examples/vector_add.py\n\n"
    "  tilelens record --tag nightly -m pytest tests/kernels -x\n\n"
    "  tilelens --db runs/h.db record --autotune all train.py --epochs 1\n\n"
    "  tilelens record --fail-on-oob -m pytest tests/kernels   # exit 3 if any lane went out of bounds\n"
)

# Exit status of `tilelens record --fail-on-oob` when any lane of any launch was out of bounds.
EXIT_OOB = 3


def register(app: typer.Typer) -> None:
    app.command(
        "record",
        help=HELP,
        context_settings={"allow_extra_args": True, "allow_interspersed_args": False},
    )(record)


def record(
    ctx: typer.Context,
    target: str = typer.Argument(..., metavar="SCRIPT|MODULE", help="Script path, or module name with -m."),
    module: bool = typer.Option(False, "-m", help="Run MODULE as `python -m MODULE` does."),
    tag: str | None = typer.Option(
        None, "--tag", metavar="TEXT", help="Label the run (ls --tag finds it; default: [tool.tilelens] tag)."
    ),
    autotune: str | None = typer.Option(
        None,
        "--autotune",
        metavar="first|all",
        help="first (default, or [tool.tilelens] autotune): record the launch the autotuner picks; "
        "all: also every config it tries.",
    ),
    on_oob: str | None = typer.Option(
        None,
        "--on-oob",
        metavar="record|raise",
        help="record (default): record launches with out-of-bounds lanes and go on; raise: record the launch, "
        "then raise tilelens.OutOfBoundsError in the program.",
    ),
    fail_on_oob: bool = typer.Option(
        False,
        "--fail-on-oob",
        help=f"Run the program to its end, then exit with status {EXIT_OOB} if any lane was out of bounds.",
    ),
    backend: str | None = typer.Option(
        None,
        "--backend",
        metavar="interpreter|compiled",
        help="interpreter (default, or [tool.tilelens] backend): run kernels in Triton's CPU interpreter and "
        "record access traces; compiled: run them compiled on their device at full speed, traces later "
        "(tilelens trace).",
    ),
    snapshots: str | None = typer.Option(
        None,
        "--snapshots",
        metavar="all|first|none",
        help="compiled backend: tensor snapshots of all launches (default), the first of each kernel version "
        "per shape, or none (launches without snapshots cannot be replayed).",
    ),
    snapshot_kernel: list[str] | None = typer.Option(  # noqa: B008 - typer reads the default
        None,
        "--snapshot-kernel",
        metavar="PATTERN",
        help="compiled backend: snapshot only kernels matching PATTERN (qualname or module.qualname, * and ?); "
        "repeatable.",
    ),
    snapshot_budget: int | None = typer.Option(
        None,
        "--snapshot-budget",
        metavar="BYTES",
        min=0,
        help="compiled backend: stop taking snapshots once they would exceed BYTES.",
    ),
    coverage: bool = typer.Option(
        False,
        "--coverage",
        help="interpreter backend: also keep the lines of each kernel that ran, for `tilelens coverage`.",
    ),
    snapshot_backlog: int | None = typer.Option(
        None,
        "--snapshot-backlog",
        metavar="BYTES",
        min=1,
        help="compiled backend: pinned memory snapshots waiting for the writer may hold (default 2 GiB); past "
        "it a launch is recorded without snapshots instead of the program waiting.",
    ),
) -> None:
    from tilelens import runner

    if autotune is not None and autotune not in ("first", "all"):
        raise typer.BadParameter("must be first or all", param_hint="--autotune")
    if on_oob is not None and on_oob not in ("record", "raise"):
        raise typer.BadParameter("must be record or raise", param_hint="--on-oob")
    if backend is not None and backend not in ("interpreter", "compiled"):
        raise typer.BadParameter("must be interpreter or compiled", param_hint="--backend")
    if snapshots is not None and snapshots not in ("all", "first", "none"):
        raise typer.BadParameter("must be all, first or none", param_hint="--snapshots")
    program = runner.Target(target, is_module=module)
    args = list(ctx.args)
    runner.check(program)  # a missing script or module: one line, before any recording starts

    st = state(ctx)
    db, blobs = st.db, st.blobs
    argv = (["-m", target] if module else [target]) + args
    options = {
        "tag": tag,
        "autotune": autotune,
        "argv": argv,
        "follow_children": True,
        "on_oob": on_oob,
        "backend": backend,
        "snapshots": snapshots,
        "snapshot_kernels": tuple(snapshot_kernel or ()),
        "snapshot_budget": snapshot_budget,
        "snapshot_backlog_bytes": snapshot_backlog,
        "coverage": coverage,
    }
    started = time.monotonic()
    # From here to the end a signal is recorded first and acted on where it cannot be lost (runner's docstring):
    # TileLens's own start-up and finish are never cut half-way, the program's part is the program's.
    with runner.finishing_signals():
        outcome, rec, oob_lanes = _record(program, args, db, blobs, options, started)
    if outcome.signal is not None:
        runner.redeliver(outcome.signal)
    if fail_on_oob and oob_lanes and not outcome.interrupted:
        render.err().print(
            f"  --fail-on-oob: {render.counted(oob_lanes, 'lane')} {'was' if oob_lanes == 1 else 'were'} out of "
            f"bounds; exiting with status {EXIT_OOB}",
            style="bold red",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(EXIT_OOB)
    raise typer.Exit(outcome.exit_code)


def _record(
    program: Any, args: list[str], db: str | None, blobs: str | None, options: dict[str, Any], started: float
) -> tuple[Any, Recording, int]:
    from tilelens import runner

    signalled = (KeyboardInterrupt, runner.Terminated)
    outcome = runner.Outcome(0)
    try:
        with runner.deferred_signals():  # importing Triton, opening the history, beginning the run
            rec = api.Recording(db, blobs, **options)
            rec.__enter__()
    except signalled:  # raised as start-up ended: the program never started
        outcome = _signal_outcome(outcome)
        _finish(rec, outcome)
        return outcome, rec, _summary(rec, outcome, started, db, blobs)
    try:
        with _LiveStatus(rec, " ".join(options["argv"])) if sys.stderr.isatty() else _NoStatus():
            try:
                outcome = runner.run(program, args)
            except signalled:  # the signal came as the program was ending
                runner.mark_consumed()
                outcome = _signal_outcome(outcome)

            def hard_exit(code: int) -> None:  # os._exit(code) in an atexit callback: the process ends there
                final = runner.Outcome(code)
                _finish(rec, final)
                _summary(rec, final, started, db, blobs)

            outcome = runner.run_exit_callbacks(outcome, hard_exit)
    except signalled:
        runner.mark_consumed()
        outcome = _signal_outcome(outcome)
    outcome = _signal_outcome(outcome)
    try:
        _finish(rec, outcome)
    except signalled:  # came while the run was being finished: store what the process now ends with
        runner.mark_consumed()
        outcome = _signal_outcome(outcome)
        rec.amend_finish(*_status(outcome))
    while True:
        try:
            with runner.deferred_signals():
                oob_lanes = _summary(rec, outcome, started, db, blobs)
            return outcome, rec, oob_lanes
        except signalled:  # came after the run was finished: the run ends as the signal says after all
            runner.mark_consumed()
            outcome = _signal_outcome(outcome)
            rec.amend_finish(*_status(outcome))


def _signal_outcome(outcome: Any) -> Any:
    """``outcome``, unless a signal came meanwhile: then how that signal ends the process."""
    from tilelens import runner

    received = runner.received_signal()
    if received is not None and outcome.signal is None and not outcome.interrupted:
        return runner.outcome_of_signal(received)
    return outcome


def _status(outcome: Any) -> tuple[str, int]:
    if outcome.interrupted:
        return "interrupted", outcome.exit_code
    if outcome.signal is not None:
        return "terminated", outcome.exit_code
    return ("failed" if outcome.exit_code else "ok"), outcome.exit_code


def _finish(rec: Recording, outcome: Any) -> None:
    """End the recording and store how the program ended (a signal that comes meanwhile waits for the end)."""
    from tilelens import runner

    with runner.deferred_signals():
        rec.exit_code = outcome.exit_code
        rec.ended_by_signal = outcome.signal
        if outcome.interrupted:
            rec.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)  # the run is marked interrupted
        else:
            rec.__exit__(None, None, None)


def _summary(rec: Recording, outcome: Any, started: float, db: str | None, blobs: str | None) -> int:
    return _print_summary(rec, outcome, time.monotonic() - started, db, blobs)


class _NoStatus:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


class _LiveStatus:
    """A spinner line on the terminal naming the latest kernel and the launches so far.

    The program's stdout is routed above the line only when it goes to the same terminal; a redirected
    stdout is left alone so that a file receives exactly what the program wrote.
    """

    def __init__(self, rec: Recording, command: str) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.spinner import Spinner

        self.rec = rec
        self.spinner = Spinner("dots", text=f"recording {command}: no Triton launch yet")
        self.live = Live(
            self.spinner,
            console=Console(file=sys.stderr),
            transient=True,
            refresh_per_second=8,
            redirect_stdout=sys.stdout.isatty(),
            redirect_stderr=True,
        )
        rec.on_launch = self.update

    def update(self, record: Any, _launch_id: int) -> None:
        from rich.text import Text

        n = len(self.rec.launch_ids)
        noun = "launch" if n == 1 else "launches"
        self.spinner.update(
            text=Text(escape(f"recording run {self.rec.run_id}: {record.kernel.name}, {n} {noun}"))
        )

    def __enter__(self) -> None:
        self.live.start()

    def __exit__(self, *exc_info: object) -> None:
        self.live.stop()
        self.rec.on_launch = None


def _print_summary(rec: Recording, outcome: Any, elapsed: float, db: str | None, blobs: str | None) -> int:
    """Print the summary on stderr; returns the out-of-bounds lanes of the run and its child runs."""
    from rich.text import Text

    console = render.err()
    per_kernel, errors, children = rec.launches_per_kernel, rec.errors, 0
    oob = (rec.oob_lanes, rec.oob_load_lanes, rec.oob_store_lanes, rec.dropped_lanes)
    tree = _tree(rec)
    if tree is not None and tree.child_runs:  # the program's child processes recorded runs of their own
        per_kernel, errors, children = tree.launches_per_kernel, tree.errors, tree.child_runs
        oob = (tree.oob_lanes, tree.oob_load_lanes, tree.oob_store_lanes, tree.dropped_lanes)
    launches = sum(per_kernel.values())
    kernels = len(per_kernel)
    head = Text("tilelens: ", style="bold")
    head.append(f"run {rec.run_id}")
    if children:
        head.append(f" and {children} child {_plural(children, 'run', 'runs')}")
    head.append(": ")
    if launches:
        head.append(f"{launches} {_plural(launches, 'launch', 'launches')} of {kernels} ")
        head.append(f"{_plural(kernels, 'kernel', 'kernels')}, ")
        head.append(f"{errors} {_plural(errors, 'error', 'errors')}", style="red" if errors else "")
        head.append(", ")
        head.append(_oob_summary(oob), style="bold red" if oob[0] else "")
    else:
        head.append("no Triton launches recorded")
    head.append(f" ({elapsed:.1f} s)")
    console.print(head)
    for name, n in sorted(per_kernel.items(), key=lambda kv: (-kv[1], kv[0])):
        console.print(Text(f"  {n:>6}  {escape(name)}"))
    if rec.autotune_events:
        console.print(Text(f"  autotune decisions: {rec.autotune_events}"))
    if rec.backend == "compiled" and launches:
        console.print(
            Text("  compiled: no access traces recorded; derive them with `tilelens trace --run ID`")
        )
        if rec.unsnapshotted:
            n = rec.unsnapshotted
            console.print(Text(f"  {n} {_plural(n, 'launch', 'launches')} without snapshots: not replayable"))
        if rec.snapshots_dropped:
            n = rec.snapshots_dropped
            console.print(
                Text(
                    f"  {n} of them while the writer's snapshot backlog was full (--snapshot-backlog raises it)",
                    style="yellow",
                )
            )
    if rec.write_failure:
        console.print(Text(escape(f"  some launches could not be written: {rec.write_failure}"), style="red"))
    if outcome.interrupted:
        console.print(Text("  interrupted; the run is marked interrupted", style="yellow"))
    elif outcome.signal is not None:
        name = signal.Signals(outcome.signal).name
        console.print(Text(f"  {name} ended the program; the run is marked terminated", style="yellow"))
    elif outcome.exit_code:
        console.print(
            Text(f"  program exited with status {outcome.exit_code}; the run is marked failed", style="red")
        )
    if rec.run_id is None:
        console.print(Text("  no run was recorded", style="yellow"))
        return oob[0]
    history = rec.history
    if history is not None:
        location = history.location
        where = location.sqlite_path or location.display_url()
        console.print(Text(escape(f"  history: {where} (blobs in {location.blobs_dir})")))
    prefix = "tilelens" + (f" --db {db}" if db else "") + (f" --blobs {blobs}" if blobs else "")
    hint = f"  next: {prefix} ls --run {rec.run_id}"
    if rec.launch_ids:
        hint += f"  |  {prefix} show {rec.launch_ids[-1]}"
    console.print(Text(escape(hint), style="dim"))
    return oob[0]


def _oob_summary(oob: tuple[int, int, int, int]) -> str:
    """Out-of-bounds lanes, loads apart from stores (atomics count as stores), and how many were dropped."""
    total, loaded, stored, dropped = oob
    text = render.counted(total, "out-of-bounds lane")
    if total:
        text += f" ({loaded:,} loaded, {stored:,} stored"
        if dropped:
            text += f", {dropped:,} of them dropped: outside every argument's memory"
        text += ")"
    return text


def _tree(rec: Recording) -> Any:
    """The run and its child processes' runs, counted from the history; None when that cannot be read."""
    if rec.run_id is None or rec.history is None:
        return None
    try:
        return api.run_tree(rec.history, rec.run_id)
    except Exception:  # noqa: BLE001 - the summary falls back to this process's own counts
        return None


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many
