"""``tilelens tables``: the tables and views a query can name, with their columns."""

from __future__ import annotations

import typer

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import JSON_OPTION, print_json, state
from tilelens.errors import UsageError

HELP = (
    "List the tables and views of the history that `tilelens sql` can query, with their columns, types "
    "and what each holds, and trace_events (every lane of every recorded trace).\n\n"
    "Examples:\n\n"
    "  tilelens tables\n\n"
    "  tilelens tables launch_overview\n\n"
    "  tilelens tables --json\n"
)


def register(app: typer.Typer) -> None:
    app.command("tables", help=HELP)(tables)


def tables(
    ctx: typer.Context,
    name: str | None = typer.Argument(None, metavar="[NAME]", help="Only this table or view."),
    as_json: bool = JSON_OPTION,
) -> None:
    st = state(ctx)
    with api.open_query(st.db, st.blobs) as q:
        found = q.tables()
    if name is not None:
        found = [t for t in found if t.name == name]
        if not found:
            raise UsageError(f"no table or view named {name!r} (`tilelens tables` lists them)")
    if as_json:
        print_json([t.as_dict() for t in found])
        return
    from rich.table import Table
    from rich.text import Text

    console = render.out()
    for i, table in enumerate(found):
        if i:
            console.print()
        title = Text(table.name, style="bold")
        title.append(f"  {table.kind}, {render.counted(len(table.columns), 'column')}", style="dim")
        console.print(title)
        # One line a column: name, type, what it holds (folded at spaces on a narrow terminal).
        rows = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2, 0, 0), collapse_padding=True)
        rows.add_column(no_wrap=True)
        rows.add_column(no_wrap=True, style="dim")
        rows.add_column()
        for column in table.columns:
            rows.add_row(
                Text("  ") + render.cell(column.name),
                render.cell(column.type),
                render.cell(column.description),
            )
        render.fit(console, rows)
        console.print(rows)
