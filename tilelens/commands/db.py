"""``tilelens db upgrade`` and ``tilelens db current``: the history's schema and size."""

from __future__ import annotations

import typer
from rich.table import Table

from tilelens import api
from tilelens.commands.common import JSON_OPTION, console, print_json, state
from tilelens.commands.escape import escape

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
