"""``tilelens replay``: re-run stored launches on the CPU or a CUDA device and say whether they still match.

Thin over :mod:`tilelens.replay`: parse, call ``replay_launch`` / ``replay_launches``, render. The exit code is
the worst outcome: 0 match, 1 mismatch, 2 error (including a launch that was recorded failing).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import JSON_OPTION, console, print_json, state
from tilelens.commands.escape import escape
from tilelens.errors import LaunchNotFoundError, RunNotFoundError
from tilelens.records import REPLAY_OUTCOMES

if TYPE_CHECKING:
    from tilelens.api import ReplayResult

_STYLE = {"match": "green", "mismatch": "red", "error": "yellow", "unknown-read": "red"}
# What to type when a replay was refused (the result's own message names no flags).
_REFUSAL_HINTS = {
    "source-changed": "--allow-changed replays it anyway, --from-history --trust-source runs the recorded source",
    "file-changed": "--allow-changed runs the file as it is now",
}


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)


def replay(
    ctx: typer.Context,
    launch_id: int | None = typer.Argument(None, metavar="[ID]", help="Launch to replay."),
    run: int | None = typer.Option(None, "--run", metavar="ID", help="Replay every launch of this run."),
    last: bool = typer.Option(False, "--last", help="Replay every launch of the newest run."),
    kernel: str | None = typer.Option(
        None,
        "--kernel",
        metavar="NAME",
        help="Replay every launch of the kernels so named (as ls --kernel: qualname or module.qualname, * wildcards).",
    ),
    trials: bool = typer.Option(
        False, "--trials", help="With --run/--kernel, include autotune trial launches."
    ),
    device: str = typer.Option(
        "cpu", "--device", help="cpu (the interpreter, bit for bit) or cuda[:N] (compiled)."
    ),
    allow_changed: bool = typer.Option(
        False,
        "--allow-changed",
        help="Replay even if the kernel's source or its file changed since it was recorded (runs the code "
        "as it is now).",
    ),
    from_history: bool = typer.Option(
        False, "--from-history", help="Run the source stored in the history (needs --trust-source)."
    ),
    trust_source: bool = typer.Option(
        False,
        "--trust-source",
        help="Allow --from-history to execute kernel source read from the history database (it must still "
        "hash to the recorded sha256 and be one plain def, checked before it runs).",
    ),
    atol: float | None = typer.Option(
        None, "--atol", help="Absolute tolerance for outputs (default per dtype)."
    ),
    rtol: float | None = typer.Option(
        None, "--rtol", help="Relative tolerance for outputs (default per dtype)."
    ),
    no_store: bool = typer.Option(
        False, "--no-store", help="Do not record the outcome in the history (nothing is written to it)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Replay recorded launches and compare outputs (and, on the CPU, access traces) with the record.

    Examples:

      tilelens replay 42

      tilelens replay --last              # every launch of the newest run

      tilelens replay --kernel matmul_kernel --device cuda
    """
    if last and run is not None:
        raise typer.BadParameter("give --run ID or --last, not both", param_hint="--last")
    batch = run is not None or kernel is not None or last
    if batch == (launch_id is not None):
        raise typer.BadParameter(
            "give a launch ID, or --run ID / --last and/or --kernel NAME", param_hint="ID"
        )
    if from_history and not trust_source:
        raise typer.BadParameter(
            "--from-history executes kernel source read from the history; add --trust-source to allow it",
            param_hint="--from-history",
        )
    options = {
        "device": device,
        "allow_changed": allow_changed,
        "from_history": from_history,
        "trust_source": trust_source,
        "atol": atol,
        "rtol": rtol,
        "store": not no_store,
    }
    # Replays use a history as it is: none is created, none migrated; --no-store writes nothing at all.
    location = state(ctx).location()
    with api.open_existing_history(location=location, read_only=no_store) as history:
        if not batch:
            assert launch_id is not None
            result = api.replay_launch(history, launch_id, **options)
            _show_one(result, as_json)
            raise typer.Exit(result.exit_code)
        if last:
            run = api.newest_run(history)
            if run is None:
                raise RunNotFoundError("the history has no runs to replay")
        ids = api.select_launches(history, run_id=run, kernel=kernel, trials=trials)
        if not ids:
            what = " and ".join(p for p in (f"run {run}" if run is not None else "", kernel or "") if p)
            raise LaunchNotFoundError(f"no launches of {what} to replay")
        results = _replay_with_progress(history, ids, options)
    _show_many(results, as_json)
    raise typer.Exit(max(r.exit_code for r in results))


def _replay_with_progress(history: object, ids: list[int], options: dict[str, object]) -> list[ReplayResult]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=render.err(), transient=True) as progress:
        task = progress.add_task("replay", total=len(ids), last="")

        def advance(result: ReplayResult) -> None:
            progress.update(task, advance=1, last=escape(f"launch {result.launch_id}: {result.outcome}"))

        return api.replay_launches(history, ids, on_result=advance, **options)  # type: ignore[arg-type]


def _show_one(result: ReplayResult, as_json: bool) -> None:
    if as_json:
        print_json(result.to_dict())
        return
    if result.outcome == "error":
        print(f"tilelens: error: {escape(' '.join(_with_hint(result).split()))}", file=sys.stderr)
        return
    out = console()
    style = _STYLE[result.outcome]
    if not result.details:
        out.print(Text.assemble((result.outcome, style), escape(f": {result.message}")))
        return
    # A mismatch can name several tensors and a trace event: one line each reads better than one long line.
    out.print(Text.assemble((result.outcome, style), escape(f": {result.headline}:")))
    for detail in result.details:
        out.print(Text(f"  {escape(str(detail))}"))


def _show_many(results: list[ReplayResult], as_json: bool) -> None:
    counts = {k: sum(r.outcome == k for r in results) for k in REPLAY_OUTCOMES}
    if as_json:
        print_json({"results": [r.to_dict() for r in results], "summary": counts})
        return
    table = Table("id", "kernel", "device", "outcome", "trace", "max err", "secs", box=box.SIMPLE_HEAD)
    for column in table.columns:
        column.no_wrap = True  # a narrow terminal scrolls; it must not truncate outcomes to "outco…"
    for r in results:
        trace = {True: "equal", False: "differs", None: "-"}[r.trace_equal]
        err = "-" if r.max_abs_err is None else f"{r.max_abs_err:.3g}"
        table.add_row(
            str(r.launch_id),
            render.cell(r.kernel),
            render.cell(r.device),
            render.cell(r.outcome, _STYLE[r.outcome]),
            trace,
            err,
            f"{r.duration_s:.3f}",
        )
    out = render.out()
    out.print(table)
    for r in results:
        if r.outcome != "match":
            out.print(Text.assemble((r.outcome, _STYLE[r.outcome]), escape(f": {_with_hint(r)}")))
    out.print(
        f"{len(results)} replayed: {counts['match']} match, {counts['mismatch']} mismatch, {counts['error']} error"
    )


def _with_hint(result: ReplayResult) -> str:
    hint = _REFUSAL_HINTS.get(result.refusal or "")
    return f"{result.message}; {hint}" if hint else result.message
