"""``tilelens db upgrade``, ``db current`` and ``db copy``: the history's schema and size, and moving runs."""

from __future__ import annotations

import typer
from rich.table import Table

from tilelens import api
from tilelens.commands.common import JSON_OPTION, console, print_json, state
from tilelens.commands.escape import escape
from tilelens.errors import NoHistoryError

RUN_OPTION = typer.Option(None, "--run", metavar="ID", help="Copy only this run (repeatable).")
db_app = typer.Typer(help="Inspect or upgrade the history database.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def upgrade(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Create the history if missing and upgrade its schema to the newest revision."""
    st = state(ctx)
    with st.open_history() as history:
        before = ", ".join(history.migrated_from) or None
        after = ", ".join(history.revision())
        location = history.location
    if as_json:
        print_json(
            {"db": location.display_url(), "blobs": str(location.blobs_dir), "from": before, "to": after}
        )
        return
    where = escape(location.display_url())
    if before == after:
        console().print(f"{where}: already at revision {after}", markup=False)
    else:
        console().print(
            f"{where}: upgraded from {before or 'an empty database'} to revision {after}", markup=False
        )


@db_app.command("current")
def current(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Show the history's location, schema revision and row counts, without changing anything."""
    status = api.inspect_history(location=state(ctx).location())
    if as_json:
        print_json(status.as_dict())
        return
    out = console()
    out.print(f"history   {escape(status.location.display_url())}", markup=False)
    out.print(f"blobs     {escape(str(status.location.blobs_dir))}", markup=False)
    head = ", ".join(status.heads)
    if not status.exists:
        out.print(f"revision  none: no history here yet (newest is {head}; `tilelens db upgrade` creates it)")
        return
    revision = ", ".join(status.revisions) or "none"
    note = "up to date" if status.up_to_date else f"behind {head}; run `tilelens db upgrade`"
    out.print(f"revision  {revision} ({note})")
    table = Table("table", "rows", box=None, pad_edge=False)
    for name, count in status.counts.items():
        table.add_row(name, str(count))
    out.print(table)


@db_app.command("copy")
def copy(
    src: str = typer.Argument(..., metavar="SRC", help="History to copy from (URL or SQLite file)."),
    dst: str = typer.Argument(..., metavar="DST", help="History to copy into; created if missing."),
    src_blobs: str | None = typer.Option(None, "--src-blobs", metavar="DIR", help="SRC's blob folder."),
    dst_blobs: str | None = typer.Option(None, "--dst-blobs", metavar="DIR", help="DST's blob folder."),
    runs: list[int] | None = RUN_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Copy runs, with their kernels, launches, arguments, autotune events, replays and blobs, into DST.

    Runs already in DST are recognised (by their uuid) and not copied twice; new ids are allocated in DST.
    Blob folders default as for --blobs: blobs/ beside a SQLite file, else TILELENS_BLOBS or ./.tilelens/blobs.
    """
    from tilelens.config import resolve_location

    src_location = resolve_location(src, src_blobs)
    dst_location = resolve_location(dst, dst_blobs)
    if not api.inspect_history(location=src_location).exists:
        raise NoHistoryError(f"no TileLens history at {src_location.display_url()} (nothing to copy)")
    with api.open_history(location=src_location) as source, api.open_history(location=dst_location) as target:
        report = api.copy_history(source, target, runs=runs or None)
    if as_json:
        print_json({"src": src_location.display_url(), "dst": dst_location.display_url(), **report.as_dict()})
        return
    out = console()
    copied = ", ".join(f"{a}->{b}" for a, b in report.runs_copied) or "none"
    out.print(
        f"copied {len(report.runs_copied)} runs ({copied}), {report.launches} launches, "
        f"{report.launch_args} arguments, {report.autotune_events} autotune events, {report.replays} replays, "
        f"{report.kernels} kernels, {report.blob_files} blob files ({report.blob_bytes:,} bytes)",
        markup=False,
        highlight=False,
    )
    if report.runs_updated or report.runs_unchanged:
        out.print(
            f"already in {dst_location.display_url()}: {len(report.runs_updated)} runs gained rows, "
            f"{report.runs_unchanged} unchanged",
            markup=False,
            highlight=False,
        )
