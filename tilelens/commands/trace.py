"""``tilelens trace``: derive the access traces of launches recorded compiled, and check them.

Thin over :func:`tilelens.api.derive_traces`: each launch is interpreted on the CPU from its before-snapshot
with the recorded config, its access trace stored on the launch, its outputs compared with the compiled
after-snapshot (CUDA tolerances) and the outcome stored like a replay. Exit code as ``tilelens replay``.
"""

from __future__ import annotations

import typer

from tilelens import api
from tilelens.commands.common import JSON_OPTION, state
from tilelens.commands.replay_report import show_many, show_one
from tilelens.errors import LaunchNotFoundError, RunNotFoundError


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)


def trace(
    ctx: typer.Context,
    launch_ids: list[int] | None = typer.Argument(  # noqa: B008 - typer reads the default
        None, metavar="[ID]...", help="Launches to trace."
    ),
    run: int | None = typer.Option(None, "--run", metavar="ID", help="Every launch of this run."),
    last: bool = typer.Option(False, "--last", help="Every launch of the newest run."),
    kernel: str | None = typer.Option(
        None, "--kernel", metavar="NAME", help="Only launches of these kernels (as ls --kernel)."
    ),
    force: bool = typer.Option(False, "--force", help="Derive again launches that already have a trace."),
    allow_changed: bool = typer.Option(
        False, "--allow-changed", help="Trace even if the kernel's source or file changed since the record."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Derive access traces of compiled launches by interpreting them on the CPU from their snapshots.

    Examples:

      tilelens trace 42 43

      tilelens trace --run 7
    """
    if last and run is not None:
        raise typer.BadParameter("give --run ID or --last, not both", param_hint="--last")
    batch = run is not None or kernel is not None or last
    if batch == bool(launch_ids):
        raise typer.BadParameter(
            "give launch IDs, or --run ID / --last and/or --kernel NAME", param_hint="ID"
        )
    options = {"force": force, "allow_changed": allow_changed}
    with api.open_existing_history(location=state(ctx).location()) as history:
        if not batch:
            ids = list(launch_ids or [])
        else:
            if last:
                run = api.newest_run(history)
                if run is None:
                    raise RunNotFoundError("the history has no runs to trace")
            ids = api.select_launches(history, run_id=run, kernel=kernel)
            if not ids:
                what = " and ".join(p for p in (f"run {run}" if run is not None else "", kernel or "") if p)
                raise LaunchNotFoundError(f"no launches of {what} to trace")
        results = api.derive_traces(history, ids, **options)
    if len(results) == 1 and not batch:
        show_one(results[0], as_json)
    else:
        show_many(results, as_json)
    raise typer.Exit(max(r.exit_code for r in results))
