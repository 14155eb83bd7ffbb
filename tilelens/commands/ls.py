"""``tilelens ls``: recorded launches (or runs), newest first."""

from __future__ import annotations

import typer

from tilelens import api
from tilelens.commands import ls_table
from tilelens.commands.common import JSON_OPTION, print_json, state
from tilelens.records import LAUNCH_STATUSES, RUN_STATUSES

HELP = (
    "List recorded launches, newest first (with --runs: recording runs).\n\n"
    "Filters combine: every one given must hold. --kernel takes a kernel's name or module.name, with "
    "* as a wildcard.\n\n"
    "Examples:\n\n"
    "  tilelens ls --limit 20\n\n"
    "  tilelens ls --kernel matmul_kernel --oob\n\n"
    "  tilelens ls --runs --status failed --json\n\n"
    "  tilelens ls --test 'tests/test_add.py::*' --oob\n\n"
    "  tilelens ls --test\n"
)


def register(app: typer.Typer) -> None:
    app.command("ls", help=HELP, no_args_is_help=False)(ls)


def ls(
    ctx: typer.Context,
    runs: bool = typer.Option(False, "--runs", help="List runs instead of launches."),
    kernel: str | None = typer.Option(None, "--kernel", metavar="NAME", help="Only this kernel."),
    run: int | None = typer.Option(None, "--run", metavar="ID", help="Only this run."),
    status: str | None = typer.Option(
        None,
        "--status",
        metavar="STATUS",
        help=f"Launches: {', '.join(LAUNCH_STATUSES)}. Runs: {', '.join(RUN_STATUSES)}.",
    ),
    oob: bool = typer.Option(False, "--oob", help="Only launches (runs) with out-of-bounds lanes."),
    tag: str | None = typer.Option(None, "--tag", metavar="TAG", help="Only runs recorded with this tag."),
    test: str | None = typer.Option(
        None,
        "--test",
        metavar="[PATTERN]",
        help="Only launches made by pytest tests whose node id matches (* wildcards, else a substring). "
        "Without PATTERN: the tests themselves, with their launches.",
    ),
    limit: int = typer.Option(50, "--limit", "-n", min=1, metavar="N", help="At most N rows."),
    as_json: bool = JSON_OPTION,
) -> None:
    allowed = RUN_STATUSES if runs else LAUNCH_STATUSES
    if status is not None and status not in allowed:
        raise typer.BadParameter(f"must be one of {', '.join(allowed)}", param_hint="--status")
    st = state(ctx)
    filters = {"kernel": kernel, "run": run, "status": status, "oob": oob, "tag": tag, "limit": limit}
    if runs and test is not None:
        raise typer.BadParameter("lists launches; leave out --runs", param_hint="--test")
    with api.open_query(st.db, st.blobs) as q:
        if runs:
            run_rows = q.runs(**filters)
            if as_json:
                print_json([r.as_dict() for r in run_rows])
                return
            # the parents of `python -c` children (xdist workers) name their command (ls_table.command)
            parents = {r.id: r for r in run_rows}
            for r in run_rows:
                if r.parent_run_id is not None and r.parent_run_id not in parents:
                    parents.update({p.id: p for p in q.runs(run=r.parent_run_id, limit=1)})
            ls_table.print_runs(run_rows, parents)
            return
        if test == "":  # `--test` alone (cli.OPTIONAL_VALUES): the tests that launched kernels
            test_rows = q.tests(**filters)
            print_json([t.as_dict() for t in test_rows]) if as_json else ls_table.print_tests(test_rows)
            return
        launch_rows = q.launches(**filters, test=test)
    if as_json:
        print_json([r.as_dict() for r in launch_rows])
    else:
        ls_table.print_launches(launch_rows)
