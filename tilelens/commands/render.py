"""Text shared by the read commands: how times, grids, configs and counts look in a terminal.

Everything printed here comes from user programs (kernel names, source lines, error messages), so it is
wrapped in ``rich.text.Text`` and never parsed as rich markup: a ``[red]`` in a kernel's source stays text,
and its control characters are escaped (:mod:`tilelens.commands.escape`): ``text`` and ``cell`` are how
every command turns stored values into output.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.text import Text

from tilelens.commands.escape import escape
from tilelens.records import PROBLEMS

if TYPE_CHECKING:
    from rich.table import Table


# A pipe without COLUMNS: lines as long as their content (rich would assume 80 columns).
UNWRAPPED = 1 << 20


def out() -> Console:
    """stdout: a terminal's width, else ``COLUMNS``, else (a pipe) no width at all: nothing wraps."""
    columns = os.environ.get("COLUMNS", "")
    width = None if sys.stdout.isatty() or columns.isdigit() else UNWRAPPED
    return Console(file=sys.stdout, highlight=False, emoji=False, width=width, soft_wrap=False)


def fit(console: Console, table: Table, widen: bool = True) -> int:
    """Sizes ``table``'s columns for ``console`` by the rule of docs/inspecting.md ("Terminal widths"): no cell
    is cut and no word broken. Text columns fold at spaces; a ``no_wrap`` column keeps each value on one line
    (its header may fold). Each column gets at least its longest word (value, for ``no_wrap``), the rest of
    the width is shared out; rich alone would shrink columns below that and cut or split words. A table
    that does not fit even so loses its edges and a space between columns.

    Returns by how many columns the table is wider than the console at its narrowest (0: it fits), so that a
    caller can fold what it may (kernel names, after a module dot) and fit again; ``widen`` then widens the console to the
    table: its lines are longer than the terminal, which wraps them, and nothing is lost.
    """
    from rich.measure import Measurement

    if not table.columns:
        return 0
    wide = console.options.update_width(UNWRAPPED)
    lows, highs = [], []
    for column in table.columns:
        header = Measurement.get(console, wide, column.header)
        cells = [Measurement.get(console, wide, c) for c in column.cells]
        low = max([header.minimum, *(c.maximum if column.no_wrap else c.minimum for c in cells)])
        lows.append(max(1, low))
        highs.append(max(1, header.maximum, *(c.maximum for c in cells)))
    for column, high in zip(table.columns, highs):
        column.width = high
    chrome = console.measure(table, options=wide).maximum - sum(highs)
    if sum(lows) > console.width - chrome:  # too wide even folded: columns closer, no edges
        table.show_edge, table.pad_edge, table.collapse_padding = False, False, True
        chrome = console.measure(table, options=wide).maximum - sum(highs)
    room = console.width - chrome
    widths = list(highs)
    if sum(highs) > room:
        widths, spare = list(lows), room - sum(lows)
        while spare > 0:  # the room left, shared out evenly among the columns that could use more
            wanting = [i for i, w in enumerate(widths) if w < highs[i]]
            if not wanting:
                break
            share = max(1, spare // len(wanting))
            for i in wanting:
                step = min(share, highs[i] - widths[i], spare)
                widths[i] += step
                spare -= step
    for column, width in zip(table.columns, widths):
        column.width, column.no_wrap, column.overflow = width, False, "fold"
    over = max(0, sum(widths) - room)
    if over and widen:
        console.width = console.width + over
    return over


def err() -> Console:
    return Console(file=sys.stderr, highlight=False, emoji=False, soft_wrap=True)


def cell(value: Any, style: str = "") -> Text:
    """One value as a single line of text, control characters escaped (None is empty)."""
    return Text("" if value is None else escape(str(value)), style=style)


text = cell


def lines(values: tuple[str, ...], style: str = "") -> Text:
    """Values on lines of their own in one cell (a kernel name folded after a module dot), each escaped."""
    return Text("\n".join(escape(v) for v in values), style=style)


def local_time(value: dt.datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def grid(value: tuple[int, int, int] | list[int]) -> str:
    return "(" + ", ".join(str(v) for v in value) + ")"


def config(value: dict[str, Any]) -> str:
    """``BLOCK_SIZE=256 num_warps=4``: the constexprs, then the launch options that were set."""
    parts = [f"{k}={_scalar(v)}" for k, v in (value.get("constexprs") or {}).items()]
    parts += [f"{k}={_scalar(v)}" for k, v in (value.get("options") or {}).items() if v is not None]
    return " ".join(parts) or "-"


def _scalar(value: Any) -> str:
    return str(value) if not isinstance(value, bool) else str(value).lower()


def size(nbytes: int | None) -> str:
    if nbytes is None:
        return "-"
    value = float(nbytes)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{nbytes} B"


def count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def counted(n: int, one: str, many: str | None = None) -> str:
    """``1 launch``, ``2 launches``: a count with its noun in the right number (``many`` defaults to one+s)."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def status(value: str, role: str = "launch") -> Text:
    shown = Text(escape(value), style="red" if value in PROBLEMS else "")
    if role != "launch":
        shown.append(f" ({escape(role)})", style="dim")
    return shown
