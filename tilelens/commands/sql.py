"""``tilelens sql "QUERY"``: one read-only SQL statement over the history, with the documented views."""

from __future__ import annotations

import contextlib
import csv
import itertools
import json
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import typer

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import state
from tilelens.commands.escape import escape
from tilelens.errors import QueryInterruptedError

HELP = (
    "Run one read-only SQL query over the history.\n\n"
    "The database itself refuses writes (INSERT, UPDATE, DELETE, DROP, ATTACH, PRAGMA "
    "assignments...): such a statement fails with a one-line message and changes nothing. Besides "
    "the tables (runs, kernels, launches, launch_args, autotune_events, replays, blobs) there are "
    "views: launch_overview, oob_launches, autotune_choices and run_overview (see README.md).\n\n"
    "Rows are printed as they come, so a huge result needs no memory; Ctrl-C stops a query at once "
    "(exit 130), and --timeout SECONDS stops one that runs too long.\n\n"
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
    timeout: float | None = typer.Option(
        None, "--timeout", metavar="SECONDS", help="Stop the query if it runs longer than this."
    ),
) -> None:
    if fmt not in ("table", "csv", "json"):
        raise typer.BadParameter("must be one of table, csv, json", param_hint="--format")
    if timeout is not None and not timeout > 0:
        raise typer.BadParameter("must be a positive number of seconds", param_hint="--timeout")
    st = state(ctx)
    with api.open_query(st.db, st.blobs) as q, _ctrl_c() as cancel:
        try:
            with q.sql_stream(query, timeout=timeout, cancel=cancel) as rows:
                if fmt == "json":
                    _print_json(rows.columns, rows)
                elif fmt == "csv":
                    # Data, written exactly as stored, for files and pipes; on a terminal someone reads it,
                    # so control characters are escaped there (as in the table).
                    shown = _escaped if sys.stdout.isatty() else _plain
                    writer = csv.writer(sys.stdout, lineterminator="\n")
                    writer.writerow([shown(c) for c in rows.columns])
                    writer.writerows([shown(v) for v in row] for row in rows)
                else:
                    _print_table(rows.columns, iter(rows))
        except KeyboardInterrupt:  # a second Ctrl-C, while Python code ran
            raise QueryInterruptedError("query interrupted") from None


@contextlib.contextmanager
def _ctrl_c() -> Iterator[threading.Event]:
    """An event Ctrl-C sets, for the query to stop at its next look (SQLite: within milliseconds).

    SQLite runs a statement in C, where Python's KeyboardInterrupt cannot reach; the query polls this event
    instead and ends with one line and exit 130. A second Ctrl-C raises KeyboardInterrupt as usual.
    """
    cancel = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield cancel
        return

    def on_sigint(_signum: int, _frame: object) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield cancel
    finally:
        signal.signal(signal.SIGINT, previous)


def _plain(value: Any) -> Any:
    """JSON- and CSV-friendly: bytes as hex, everything else as the driver returned it."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return value


def _escaped(value: Any) -> Any:
    value = _plain(value)
    return escape(value) if isinstance(value, str) else value


def _print_json(columns: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    """The rows as ``json.dumps(list_of_objects, indent=2)`` prints them, written one object at a time."""
    out = sys.stdout
    first = True
    for row in rows:
        text = json.dumps(dict(zip(columns, (_plain(v) for v in row))), indent=2, default=str)
        out.write(("[\n" if first else ",\n") + "\n".join("  " + line for line in text.splitlines()))
        first = False
    out.write("[]\n" if first else "\n]\n")


# Up to this many rows make a table sized to its content; a longer result is printed as its rows come, with
# the column widths of its first TABLE_ROWS rows (a longer value widens its own line only; none is cut).
TABLE_ROWS = 1000


def _print_table(columns: list[str], rows: Iterator[tuple[Any, ...]]) -> None:
    first = list(itertools.islice(rows, TABLE_ROWS + 1))
    if len(first) <= TABLE_ROWS:
        _rich_table(columns, first)
        count = len(first)
    else:
        count = _streamed_table(columns, itertools.chain(first, rows), first)
    noun = "row" if count == 1 else "rows"
    render.err().print(f"({count} {noun})", style="dim", markup=False)


def _rich_table(columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in columns:
        table.add_column(render.cell(name))
    for row in rows:
        table.add_row(*(render.cell(_plain(v)) for v in row))
    render.out().print(table)


def _streamed_table(
    columns: list[str], rows: Iterator[tuple[Any, ...]], sample: list[tuple[Any, ...]]
) -> int:
    def text(value: Any) -> str:
        return render.cell(_plain(value)).plain

    widths = [len(text(name)) for name in columns]
    for row in sample:
        widths = [max(w, len(text(v))) for w, v in zip(widths, row)]
    out = sys.stdout

    def line(cells: Iterable[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip() + "\n"

    out.write(line(text(name) for name in columns))
    out.write("  ".join("─" * w for w in widths) + "\n")
    count = 0
    for row in rows:
        out.write(line(text(v) for v in row))
        count += 1
    return count
