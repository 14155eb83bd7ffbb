"""``tilelens db upgrade``, ``db current`` and ``db copy``: the history's schema and size, and moving runs."""

from __future__ import annotations

import typer
from rich.table import Table

from tilelens import api
from tilelens.commands import render
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
    # DST's blob folder is checked before DST is created: a copy that cannot store blobs leaves nothing.
    api.check_blob_folder(dst_location.blobs_dir)
    with api.open_copy_source(src_location) as source, api.open_history(location=dst_location) as target:
        report = api.copy_history(source, target, runs=runs or None)
    if as_json:
        print_json({"src": src_location.display_url(), "dst": dst_location.display_url(), **report.as_dict()})
        return
    out = console()
    copied = ", ".join(f"{a}->{b}" for a, b in report.runs_copied) or "none"
    out.print(
        f"copied {render.counted(len(report.runs_copied), 'run')} ({copied}), "
        f"{render.counted(report.launches, 'launch', 'launches')}, {render.counted(report.launch_args, 'argument')}, "
        f"{render.counted(report.autotune_events, 'autotune event')}, {render.counted(report.replays, 'replay')}, "
        f"{render.counted(report.kernels, 'kernel')}, {render.counted(report.blob_files, 'blob file')} "
        f"({render.counted(report.blob_bytes, 'byte')})",
        markup=False,
        highlight=False,
    )
    if report.runs_updated or report.runs_unchanged:
        out.print(
            f"already in {dst_location.display_url()}: {render.counted(len(report.runs_updated), 'run')} gained rows, "
            f"{report.runs_unchanged} unchanged",
            markup=False,
            highlight=False,
        )


@db_app.command("grant-reader")
def grant_reader(
    ctx: typer.Context,
    role: str = typer.Argument(..., metavar="ROLE", help="The role to make a reader (created if missing)."),
    apply: bool = typer.Option(
        False, "--apply", help="Run the statements (as --db's user) instead of printing them."
    ),
) -> None:
    """Print (or run, with --apply) the SQL that makes ROLE a reader of a PostgreSQL history.

    The role may log in, connect to the database, use the history's schema and SELECT its tables and views;
    nothing else. Read commands given a URL that names the role (postgresql+psycopg://ROLE@host/db) then read
    as it, and the server itself refuses anything but reading the history.
    """
    location = state(ctx).location()
    with api.open_existing_history(location=location) as history:
        if apply:
            done = api.grant_reader(history, role)
            for statement in done:
                console().print(escape(f"{statement};"), markup=False, highlight=False)
            console().print(escape(f"-- {role} may now read {location.display_url()}"), markup=False)
            return
        statements = api.grant_reader_sql(history, role)
    out = console()
    out.print(escape(f"-- run as the owner of {location.display_url()}; skip CREATE ROLE if it exists"),
              markup=False, highlight=False)  # fmt: skip
    for statement in statements:
        out.print(escape(f"{statement};"), markup=False, highlight=False)
