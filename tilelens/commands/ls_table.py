"""How ``tilelens ls`` lays out launches: in full on a wide terminal, compact below :data:`WIDE` columns.

The compact layout keeps a row on one line at 80 columns: times are short (``HH:MM`` today, ``MM-DD HH:MM``
this year, the date before), grids lose their trailing 1s (``4x2``), the lane headers are short, columns are
closer, kernel names are whole or shortened from the module side (``…vector_add.add_kernel``, never the
kernel's own name), and the config folds onto more lines within its cell.
The width is the terminal's (``COLUMNS`` where set); a pipe gets 240 columns, the full layout
(:func:`tilelens.commands.render.out`).
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from rich.text import Text

from tilelens.commands import render

if TYPE_CHECKING:
    from rich.table import Table

    from tilelens.api import LaunchSummary

WIDE = 120  # columns from which the full layout is used
CONFIG_WIDTH = 18  # the compact layout folds a longer config onto more lines


def short_time(value: dt.datetime | None, now: dt.datetime) -> str:
    """Local time, as short as it can be next to ``now``: ``HH:MM`` today, ``MM-DD HH:MM`` this year."""
    if value is None:
        return "-"
    local, today = value.astimezone(), now.astimezone()
    if local.date() == today.date():
        return local.strftime("%H:%M")
    if local.year == today.year:
        return local.strftime("%m-%d %H:%M")
    return local.strftime("%Y-%m-%d")


def shorten(name: str, qualname: str, width: int) -> str:
    """``name`` (module.qualname) in ``width`` characters if it can be: whole module components are dropped
    from the left (``…vector_add.add_kernel``), the qualname always stays whole."""
    if len(name) <= width:
        return name
    module = name[: len(name) - len(qualname)]  # "pkg.mod." (with its last dot)
    for i, char in enumerate(module):
        if char == "." and len(name) - i - 1 + 1 <= width:
            return "…" + name[i + 1 :]
    return qualname


def short_grid(grid: tuple[int, int, int] | list[int]) -> str:
    """``4``, ``4x2``, ``4x2x3``: the grid without its trailing 1s."""
    sizes = list(grid)
    while len(sizes) > 1 and sizes[-1] == 1:
        sizes.pop()
    return "x".join(str(n) for n in sizes)


def print_launches(rows: list[LaunchSummary], now: dt.datetime | None = None) -> None:
    console = render.out()
    if not rows:
        console.print("no launches match", style="dim")
        return
    compact = console.width < WIDE
    now = now or dt.datetime.now(dt.timezone.utc)
    kernels, config_width = [r.kernel for r in rows], None
    if compact:
        # What the other columns take with every config folded as far as it goes (its longest word) is
        # measured with empty kernel cells; the rest goes to the kernel names, then back to the config.
        configs = [render.config(r.config) for r in rows]
        narrowest = min(CONFIG_WIDTH, max(len(word) for c in configs for word in c.split()))
        widest = min(CONFIG_WIDTH, max(len(c) for c in configs))
        measured = console.measure(_table(rows, [""] * len(rows), True, now, narrowest)).maximum
        spare = console.width - measured + len("kernel")
        width = max(max(len(r.qualname) for r in rows), min(max(len(k) for k in kernels), spare))
        kernels = [shorten(r.kernel, r.qualname, width) for r in rows]
        config_width = narrowest + max(0, min(widest - narrowest, spare - width))
    table = _table(rows, kernels, compact, now, config_width)
    if compact:  # narrower than the table can be: longer lines (the terminal wraps them), no cell cut or lost
        wide = console.options.update_width(1000)
        console.width = max(console.width, console.measure(table, options=wide).maximum)
    console.print(table)


def _table(
    rows: list[LaunchSummary], kernels: list[str], compact: bool, now: dt.datetime, config_width: int | None
) -> Table:
    from rich import box
    from rich.table import Table

    # Compact: one space of padding between columns and none at the edges (2 columns more per separator).
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=not compact, collapse_padding=compact)
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("kernel", no_wrap=True)
    table.add_column("grid", no_wrap=True)
    configs = [render.config(r.config) for r in rows]
    table.add_column("config", overflow="fold", max_width=config_width)
    table.add_column("active" if compact else "active lanes", justify="right", no_wrap=True)
    table.add_column("oob" if compact else "oob lanes", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    tests = any(r.test_nodeid for r in rows)
    if tests:
        table.add_column("test")
    for r, kernel, config in zip(rows, kernels, configs):
        test = [render.cell(r.test_nodeid or "")] if tests else []
        time = short_time(r.started_at, now) if compact else render.local_time(r.started_at)
        table.add_row(
            render.cell(r.id),
            Text(time),
            render.cell(kernel),
            render.cell(short_grid(r.grid) if compact else render.grid(r.grid)),
            render.cell(config),
            render.cell(render.count(r.active_lanes)),
            render.cell(render.count(r.oob_lanes), "bold red" if r.oob_lanes else ""),
            render.status(r.status, r.role),
            *test,
        )
    return table
