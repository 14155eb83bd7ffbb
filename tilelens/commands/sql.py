"""``tilelens sql "QUERY"``: one read-only SQL statement over the history, with the documented views."""

from __future__ import annotations

import contextlib
import csv
import json
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import typer

from tilelens import api
from tilelens.commands import sql_table
from tilelens.commands.common import state
from tilelens.commands.escape import escape
from tilelens.errors import QueryInterruptedError, UsageError

HELP = (
    "Run one read-only SQL query over the history.\n\n"
    "The database itself refuses writes (INSERT, UPDATE, DELETE, DROP, ATTACH, PRAGMA "
    "assignments...): such a statement fails with a one-line message and changes nothing. Besides "
    "the tables (runs, kernels, launches, launch_args, autotune_events, replays, blobs) there are "
    "views: launch_overview, oob_launches, autotune_choices and run_overview (see docs/sql.md; "
    "`tilelens tables` lists them with their columns). A query that names trace_events reads every "
    "lane of every recorded trace (the columns of `tilelens export`) and can join them with the tables "
    "and views (DuckDB, the duckdb extra).\n\n"
    "QUERY - reads the query from standard input.\n\n"
    "Rows are printed as they come, so a huge result needs no memory; Ctrl-C stops a query at once "
    "(exit 130), and --timeout SECONDS stops one that runs too long.\n\n"
    "Examples:\n\n"
    '  tilelens sql "SELECT kernel, count(*) FROM launch_overview GROUP BY kernel"\n\n'
    '  tilelens sql "SELECT * FROM oob_launches ORDER BY launch_id DESC LIMIT 5" --format json\n\n'
    "  tilelens sql - < query.sql\n"
)


def register(app: typer.Typer) -> None:
    app.command("sql", help=HELP)(sql)


def sql(
    ctx: typer.Context,
    query: str = typer.Argument(
        ..., metavar="QUERY", help="One SQL statement (SELECT, WITH ...); - reads stdin."
    ),
    fmt: str = typer.Option("table", "--format", "-f", metavar="FORMAT", help="table, csv or json."),
    timeout: float | None = typer.Option(
        None, "--timeout", metavar="SECONDS", help="Stop the query if it runs longer than this."
    ),
) -> None:
    if fmt not in ("table", "csv", "json"):
        raise typer.BadParameter("must be one of table, csv, json", param_hint="--format")
    if timeout is not None and not timeout > 0:
        raise typer.BadParameter("must be a positive number of seconds", param_hint="--timeout")
    if query == "-":
        query = sys.stdin.read()
        if not query.strip():
            raise UsageError("no query on standard input")
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
                    sql_table.print_table(rows.columns, iter(rows))
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
