"""How ``tilelens sql`` prints rows as a table: numbers right-aligned, floats to 6 significant digits.

Only the table is formatted; ``--format csv`` and ``json`` keep every value exactly as the database gave it.
A column is numeric when every value in it that is not NULL is an int, a float or a decimal (booleans are
not numbers here); for a streamed table (more than :data:`TABLE_ROWS` rows) the first rows decide.
"""

from __future__ import annotations

import decimal
import itertools
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from tilelens.commands import render

# Up to this many rows make a table sized to its content; a longer result is printed as its rows come, with
# the column widths of its first TABLE_ROWS rows (a longer value widens its own line only; none is cut).
TABLE_ROWS = 1000
FLOAT_DIGITS = 6


def shown(value: Any) -> Any:
    """A value as a table cell shows it: bytes as hex, floats to :data:`FLOAT_DIGITS` significant digits."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, float):
        return f"{value:.{FLOAT_DIGITS}g}"
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool)


def numeric_columns(width: int, rows: Sequence[Sequence[Any]]) -> list[bool]:
    """Per column: some value is not NULL and every such value is a number."""
    seen = [False] * width
    numeric = [True] * width
    for row in rows:
        for i, value in enumerate(row):
            if value is not None:
                seen[i] = True
                numeric[i] = numeric[i] and _is_number(value)
    return [s and n for s, n in zip(seen, numeric)]


def print_table(columns: list[str], rows: Iterator[tuple[Any, ...]]) -> None:
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
    for name, numeric in zip(columns, numeric_columns(len(columns), rows)):
        table.add_column(render.cell(name), justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*(render.cell(shown(v)) for v in row))
    console = render.out()
    render.fit(console, table)  # values fold at spaces; none is cut
    console.print(table)


def _streamed_table(
    columns: list[str], rows: Iterator[tuple[Any, ...]], sample: list[tuple[Any, ...]]
) -> int:
    def text(value: Any) -> str:
        return render.cell(shown(value)).plain

    widths = [len(text(name)) for name in columns]
    for row in sample:
        widths = [max(w, len(text(v))) for w, v in zip(widths, row)]
    right = numeric_columns(len(columns), sample)
    out = sys.stdout

    def line(cells: Iterable[str], align: Sequence[bool]) -> str:
        parts = (c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, align))
        return "  ".join(parts).rstrip() + "\n"

    out.write(line((text(name) for name in columns), right))
    out.write("  ".join("─" * w for w in widths) + "\n")
    count = 0
    for row in rows:
        out.write(line((text(v) for v in row), right))
        count += 1
    return count
