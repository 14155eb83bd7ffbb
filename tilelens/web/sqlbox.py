"""The web app's SQL box (``/sql``, ``/sql.csv``): one read-only statement, as ``tilelens sql`` runs it.

The statement goes through the same gate as ``tilelens sql`` (:meth:`tilelens.store.read.query.HistoryQuery.
sql_stream`: SQLite opened read-only with an authorizer, PostgreSQL through its allowlist in a read-only
transaction), so a write or an escape is refused by the database layer, and the page shows that one-line
error with status 400. The page shows the first :data:`PAGE_ROWS` rows; ``/sql.csv`` downloads the whole
result, up to :data:`CSV_MAX_CHARS` characters.

A CSV file is often opened in a spreadsheet, which runs a cell beginning with ``=``, ``+``, ``-`` or ``@`` (or
a tab or carriage return before one) as a formula: such text cells, and column names, get a leading
apostrophe (``'``), which spreadsheets show as text. Numbers stay numbers; bytes are written as hex, as
``tilelens sql --format csv`` writes them.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlencode

from tilelens.errors import UsageError
from tilelens.reporters.html import e, table

PAGE_ROWS = 1000  # rows shown on the page; the CSV has them all
MAX_QUERY_CHARS = 10_000
CSV_MAX_CHARS = 64 << 20  # a larger result is refused (400): narrow the query, or use `tilelens sql`
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CSV_NOTE = (
    "In the CSV, text that begins with =, +, -, @, a tab or a carriage return starts with an apostrophe (') "
    "so that a spreadsheet shows it as text instead of running it as a formula."
)


def query_text(raw: str) -> str:
    """The query from a request: a browser's CRLF line ends made LF; refused (400) when too long."""
    if len(raw) > MAX_QUERY_CHARS:
        raise UsageError(
            f"the query is {len(raw):,} characters long; the SQL box takes up to {MAX_QUERY_CHARS:,}"
        )
    return raw.replace("\r\n", "\n")


def csv_cell(value: Any) -> Any:
    """A value as the CSV holds it: bytes as hex, text that a spreadsheet would run as a formula quoted."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_text(columns: Sequence[str], rows: Iterable[Sequence[Any]], max_chars: int = CSV_MAX_CHARS) -> str:
    """The result as CSV (RFC 4180: CRLF line ends, quotes where needed); past ``max_chars``, a UsageError."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow([csv_cell(c) for c in columns])
    for row in rows:
        writer.writerow([csv_cell(v) for v in row])
        if out.tell() > max_chars:
            raise UsageError(
                f"the result is over {max_chars:,} characters as CSV; narrow the query, or use "
                "`tilelens sql --format csv`"
            )
    return out.getvalue()


def _cell(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return e(bytes(value).hex())
    return e("" if value is None else value)


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def sql_body(
    query: str,
    columns: Sequence[str] | None = None,
    rows: Sequence[Sequence[Any]] = (),
    more: bool = False,
    error: str | None = None,
) -> str:
    """The box with ``query`` in it and, once run, its error or its rows (``more``: there were more)."""
    body = (
        '<form method="get" action="/sql"><textarea name="q" rows="8" cols="100" spellcheck="false" '
        f'autofocus>{e(query)}</textarea><br><button type="submit">Run</button></form>'
        "<p>One read-only statement, as <code>tilelens sql</code> runs it. Tables: runs, kernels, launches, "
        "launch_args, autotune_events, replays, blobs; views: launch_overview, oob_launches, autotune_choices, "
        "run_overview.</p>"
    )
    if error is not None:
        return body + f'<p class="bad" id="sql-error">{e(error)}</p>'
    if columns is None:
        return body
    shown = len(rows)
    count = (
        f"first {shown} rows (the CSV has them all)" if more else f"{shown} {'row' if shown == 1 else 'rows'}"
    )
    csv_href = "/sql.csv?" + urlencode({"q": query})
    body += f'<p id="sql-count">{e(count)} · <a href="{e(csv_href)}" download>CSV</a></p>'
    body += f"<p>{e(CSV_NOTE)}</p>"
    numeric = [
        i
        for i in range(len(columns))
        if any(row[i] is not None for row in rows) and all(row[i] is None or _numeric(row[i]) for row in rows)
    ]
    cells = [[_cell(v) for v in row] for row in rows]
    return body + f'<div id="sql-result">{table(list(columns), cells, numeric)}</div>'
