"""``tilelens sql "QUERY"``: one read-only SQL statement over the history, with the documented views."""

from __future__ import annotations

import csv
import sys
from typing import Any

import typer

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import print_json, state
from tilelens.commands.escape import escape

HELP = (
    "Run one read-only SQL query over the history.\n\n"
    "The database itself refuses writes (INSERT, UPDATE, DELETE, DROP, ATTACH, PRAGMA "
    "assignments...): such a statement fails with a one-line message and changes nothing. Besides "
    "the tables (runs, kernels, launches, launch_args, autotune_events, replays, blobs) there are "
    "views: launch_overview, oob_launches, autotune_choices and run_overview (see README.md).\n\n"
    "Examples:\n\n"
    '  tilelens sql "SELECT kernel, count(*) FROM launch_overview GROUP BY kernel"\n\n'
    '  tilelens sql "SELECT * FROM oob_launches ORDER BY launch_id DESC LIMIT 5" --format json\n'
)


def register(app: typer.Typer) -> None:
    app.command("sql", help=HELP)(sql)


def sql(
    ctx: typer.Context,
    query: str = typer.Argument(..., metavar="QUERY", help="One SQL statement (SELECT, WITH ...)."),
    fmt: str = typer.Option("table", "--format", "-f", metavar="FORMAT", help="table, csv or json."),
) -> None:
    if fmt not in ("table", "csv", "json"):
        raise typer.BadParameter("must be one of table, csv, json", param_hint="--format")
    st = state(ctx)
    with api.open_query(st.db, st.blobs) as q:
        result = q.sql(query)
    if fmt == "json":
        print_json([dict(zip(result.columns, (_plain(v) for v in row))) for row in result.rows])
    elif fmt == "csv":
        # Data, written exactly as stored, for files and pipes; on a terminal someone reads it, so control
        # characters are escaped there (as in the table).
        shown = _escaped if sys.stdout.isatty() else _plain
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow([shown(c) for c in result.columns])
        writer.writerows([[shown(v) for v in row] for row in result.rows])
    else:
        _print_table(result.columns, result.rows)


def _plain(value: Any) -> Any:
    """JSON- and CSV-friendly: bytes as hex, everything else as the driver returned it."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return value


def _escaped(value: Any) -> Any:
    value = _plain(value)
    return escape(value) if isinstance(value, str) else value


def _print_table(columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    from rich import box
    from rich.table import Table

    console = render.out()
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in columns:
        table.add_column(render.cell(name))
    for row in rows:
        table.add_row(*(render.cell(_plain(v)) for v in row))
    console.print(table)
    noun = "row" if len(rows) == 1 else "rows"
    render.err().print(f"({len(rows)} {noun})", style="dim", markup=False)
