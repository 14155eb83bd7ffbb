"""``tilelens replay``: re-run stored launches on the CPU or a CUDA device and say whether they still match.

Thin over :mod:`tilelens.replay`: parse, call ``replay_launch`` / ``replay_launches``, render. The exit code is
the worst outcome: 0 match, 1 mismatch, 2 error (including a launch that was recorded failing).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import typer

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import JSON_OPTION, state
from tilelens.commands.escape import escape
from tilelens.commands.replay_report import show_many, show_one
from tilelens.errors import LaunchNotFoundError, RunNotFoundError

if TYPE_CHECKING:
    from tilelens.api import ReplayResult


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
    python: str | None = typer.Option(
        None,
        "--python",
        metavar="PATH",
        help="Replay in another Python (another venv, another Triton) through a standalone repro folder "
        "(tilelens repro); the stored outcome names both Tritons.",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Replay recorded launches and compare outputs (and, on the CPU, access traces) with the record.

    Examples:

      tilelens replay 42

      tilelens replay --last              # every launch of the newest run

      tilelens replay --kernel matmul_kernel --device cuda

      tilelens replay 42 --python .venv-triton-3.6.0/bin/python
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
    for hint, value in (("--atol", atol), ("--rtol", rtol)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise typer.BadParameter("must be a finite number >= 0", param_hint=hint)
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
    if python is not None and (from_history or allow_changed or atol is not None or rtol is not None):
        raise typer.BadParameter(
            "--python runs the recorded launch's repro as it is: without --from-history, --allow-changed, "
            "--atol or --rtol",
            param_hint="--python",
        )
    with api.open_existing_history(location=location, read_only=no_store) as history:
        if python is not None:
            if batch:
                raise typer.BadParameter("--python replays one launch ID", param_hint="--python")
            assert launch_id is not None
            result = api.replay_with_python(history, launch_id, python, device=device, store=not no_store)
            show_one(result, as_json)
            raise typer.Exit(result.exit_code)
        if not batch:
            assert launch_id is not None
            result = api.replay_launch(history, launch_id, **options)
            show_one(result, as_json)
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
    show_many(results, as_json)
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
