"""``tilelens diff A B``: two launches compared, or two versions of one kernel; exits as diff(1) does."""

from __future__ import annotations

import typer

from tilelens import api
from tilelens.commands.common import JSON_OPTION, print_json, state
from tilelens.errors import UsageError

HELP = (
    "Compare two launches: kernel version (a unified diff of the sources when they differ), config, grid, "
    "arguments, every written tensor element by element, and the access traces event by event.\n\n"
    "With --kernel NAME --source-sha A B: two versions of one kernel side by side (bytes and lanes per "
    "program, out-of-bounds lanes, autotune choices); A and B are source-hash prefixes.\n\n"
    "Exit status: 0 same, 1 different, 2 error (as diff).\n\n"
    "Examples:\n\n"
    "  tilelens diff 41 42\n\n"
    "  tilelens diff 41 42 --json | jq .outputs\n\n"
    "  tilelens diff --kernel add_kernel --source-sha 3f2a 9c01\n"
)


def register(app: typer.Typer) -> None:
    app.command("diff", help=HELP)(diff)


def diff(
    ctx: typer.Context,
    first: str = typer.Argument(
        ..., metavar="A", help="Launch id (with --source-sha: a source hash prefix)."
    ),
    second: str = typer.Argument(
        ..., metavar="B", help="Launch id (with --source-sha: a source hash prefix)."
    ),
    kernel: str | None = typer.Option(
        None, "--kernel", metavar="NAME", help="Compare versions of this kernel."
    ),
    source_sha: bool = typer.Option(
        False, "--source-sha", help="A and B are source-hash prefixes of --kernel."
    ),
    as_json: bool = JSON_OPTION,
) -> int:
    from tilelens.commands import diff_report

    if source_sha != (kernel is not None):
        raise UsageError(
            "--kernel NAME and --source-sha go together (tilelens diff --kernel NAME --source-sha A B)"
        )
    st = state(ctx)
    with api.open_query(st.db, st.blobs) as q:
        if kernel is not None:
            versions = api.diff_versions(q, kernel, first, second)
            same = versions.same
            print_json(versions.as_dict()) if as_json else diff_report.print_version_diff(versions)
        else:
            launches = api.diff_launches(q, _launch_id(first), _launch_id(second))
            same = launches.same
            print_json(launches.as_dict()) if as_json else diff_report.print_launch_diff(launches)
    return 0 if same else 1


def _launch_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"launch id must be an integer, not {text!r}") from None
