"""``tilelens check``: races, hazards and out-of-bounds lanes of recorded launches, from their access traces.

Thin over :func:`tilelens.api.check_launches`; the rules are in docs/check.md. Exit 0 without findings (of the
``--fail-on`` kinds), 1 with findings, 2 on an error. A read command: it opens the history read-only.
"""

from __future__ import annotations

import typer

from tilelens import api
from tilelens.commands.common import JSON_OPTION, print_json, state
from tilelens.commands.escape import escape
from tilelens.errors import LaunchNotFoundError, NoTraceError, RunNotFoundError

HELP = (
    "Check launches for races and hazards between their programs, from the stored access traces: "
    "write-write races (an element stored by two programs), read-write hazards (read by one program, "
    "stored by another), mixed atomics (plain accesses to an element another program updates atomically) "
    "and out-of-bounds lanes. Accesses that programs make holding one same spin lock are reported as "
    "synchronized, not as findings.\n\n"
    "Exit status: 0 without findings, 1 with findings, 2 on an error.\n\n"
    "Examples:\n\n"
    "  tilelens check 42\n\n"
    "  tilelens check --last --fail-on write-write,read-write\n\n"
    "  tilelens check --run 7 --json | jq '.launches[].findings[] | {kind, arg_name}'\n"
)


def register(app: typer.Typer) -> None:
    app.command("check", help=HELP)(check)


def check(
    ctx: typer.Context,
    launch_ids: list[int] | None = typer.Argument(  # noqa: B008 - typer reads the default
        None, metavar="[ID]...", help="Launches to check."
    ),
    run: int | None = typer.Option(None, "--run", metavar="ID", help="Every launch of this run."),
    last: bool = typer.Option(False, "--last", help="Every launch of the newest run."),
    fail_on: str = typer.Option(
        "all",
        "--fail-on",
        metavar="KINDS",
        help=f"Exit 1 only for findings of these kinds, comma-separated: {', '.join(api.FINDING_KINDS)} or all.",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    if last and run is not None:
        raise typer.BadParameter("give --run ID or --last, not both", param_hint="--last")
    if (run is not None or last) == bool(launch_ids):
        raise typer.BadParameter("give launch IDs, or --run ID, or --last", param_hint="ID")
    try:
        kinds = api.parse_finding_kinds(fail_on)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fail-on") from None
    st = state(ctx)
    with api.open_query(st.db, st.blobs) as q:
        if launch_ids:
            checks = api.check_launches(q, launch_ids)
            unchecked = next((c for c in checks if not c.checked), None)
            if unchecked is not None:  # a launch named by its id must be checkable
                raise NoTraceError(unchecked.reason or f"launch {unchecked.launch_id} has no access trace")
        else:
            if last:
                newest = q.runs(limit=1)
                if not newest:
                    raise RunNotFoundError("the history has no runs to check")
                run = newest[0].id
            elif not q.runs(run=run, limit=1):
                raise RunNotFoundError(f"no run {run} in the history")
            ids = sorted(s.id for s in q.launches(run=run, limit=None) if s.role == "launch")
            if not ids:
                raise LaunchNotFoundError(f"no launches of run {run} to check")
            checks = api.check_launches(q, ids)
    if as_json:
        print_json(
            {"launches": [c.as_dict() for c in checks], "findings": sum(len(c.findings) for c in checks)}
        )
    else:
        lines = [line for c in checks for line in api.check_lines(c)]
        if len(checks) > 1 or not launch_ids:  # a run: how it went, in one line
            lines.append(api.check_summary(checks))
        typer.echo("\n".join(escape(line) for line in lines))  # plain lines: never wrapped nor styled
    raise typer.Exit(1 if any(c.failing(kinds) for c in checks) else 0)
