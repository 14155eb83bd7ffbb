"""How ``tilelens ls`` lays out launches: in full on a wide terminal, compact below :data:`WIDE` columns.

The compact layout is for 80 columns: times are short (``HH:MM`` today, ``MM-DD HH:MM`` this year, the date
before), grids lose their trailing 1s (``4x2``), the lane headers are short, columns are closer. In either
layout the table follows the rule of :func:`tilelens.commands.render.fit`: the config and test columns fold
at spaces, and when the table is still too wide, kernel names fold after a dot of their module side
(``examples.`` / ``vector_add.add_kernel``; nothing left out, never inside the kernel's own name). The width is the terminal's, else ``COLUMNS``;
a pipe without ``COLUMNS`` is not wrapped at all, the full layout (:func:`tilelens.commands.render.out`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text

from tilelens.commands import render

if TYPE_CHECKING:
    from rich.table import Table

    from tilelens.api import LaunchSummary, RunSummary, TestSummary

WIDE = 120  # columns from which the full layout is used


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


def fold_name(name: str, qualname: str, width: int) -> tuple[str, ...]:
    """``name`` (module.qualname) on lines of at most ``width`` characters where it can be: it breaks after
    a dot of the module side (``liger_kernel.ops.`` / ``softmax.softmax_bwd_kernel``), never inside a
    component; the qualname stays whole on its own line. Nothing of the name is left out."""
    if len(name) <= width:
        return (name,)
    module = name[: len(name) - len(qualname)]  # "pkg.mod." (with its last dot)
    parts = [p + "." for p in module.split(".")[:-1]] + [qualname]
    lines = [""]
    for part in parts:
        if lines[-1] and len(lines[-1]) + len(part) > width:
            lines.append("")
        lines[-1] += part
    return tuple(lines)


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
    table = _table(rows, [(r.kernel,) for r in rows], compact, now)
    over = render.fit(console, table, widen=False)
    if over:  # the kernel names fold after a module dot, as narrow as the table needs
        width = max(max(len(r.qualname) for r in rows), max(len(r.kernel) for r in rows) - over)
        table = _table(rows, [fold_name(r.kernel, r.qualname, width) for r in rows], compact, now)
        render.fit(console, table)
    console.print(table)


def _table(
    rows: list[LaunchSummary], kernels: list[tuple[str, ...]], compact: bool, now: dt.datetime
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
    table.add_column("config")
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
            render.lines(kernel),
            render.cell(short_grid(r.grid) if compact else render.grid(r.grid)),
            render.cell(config),
            render.cell(render.count(r.active_lanes)),
            render.cell(render.count(r.oob_lanes), "bold red" if r.oob_lanes else ""),
            render.status(r.status, r.role),
            *test,
        )
    return table


RUN_COLUMNS = (
    ("run", "right"),
    ("started", "left"),
    ("tag", "left"),
    ("command", "left"),
    ("launches", "right"),
    ("kernels", "right"),
    ("errors", "right"),
    ("oob lanes", "right"),
    ("status", "left"),
    ("parent", "right"),
)


def print_runs(
    rows: list[RunSummary], parents: dict[int, RunSummary] | None = None, now: dt.datetime | None = None
) -> None:
    """``ls --runs``: below :data:`WIDE` columns compact as the launches (short times, closer columns); the
    tag and parent columns only where some run has one."""
    from rich import box
    from rich.table import Table

    console = render.out()
    if not rows:
        console.print("no runs match", style="dim")
        return
    compact = console.width < WIDE
    now = now or dt.datetime.now(dt.timezone.utc)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=not compact, collapse_padding=compact)
    shown = {
        "tag": any(r.tag for r in rows),
        "parent": any(r.parent_run_id is not None for r in rows),  # child processes' runs: who started them
    }
    for name, justify in RUN_COLUMNS:
        if shown.get(name, True):  # only the tag, command and status fold (at spaces)
            wraps = name in ("tag", "command", "status")
            table.add_column(name, justify=justify, no_wrap=not wraps)  # type: ignore[arg-type]
    for r in rows:
        status = r.status if r.exit_code in (None, 0) else f"{r.status} (exit {r.exit_code})"
        cells = {
            "run": render.cell(r.id),
            "started": Text(short_time(r.started_at, now) if compact else render.local_time(r.started_at)),
            "tag": render.cell(r.tag or ""),
            "command": render.cell(command(r, (parents or {}).get(r.parent_run_id or 0))),
            "launches": render.cell(render.count(r.launches)),
            "kernels": render.cell(render.count(r.kernels)),
            "errors": render.cell(render.count(r.errors), "red" if r.errors else ""),
            "oob lanes": render.cell(render.count(r.oob_lanes), "bold red" if r.oob_lanes else ""),
            "status": render.status(status) if r.status == "ok" else render.cell(status, "red"),
            "parent": render.cell(r.parent_run_id if r.parent_run_id is not None else ""),
        }
        table.add_row(*(cells[name] for name, _ in RUN_COLUMNS if shown.get(name, True)))
    render.fit(console, table)
    console.print(table)


def command(run: RunSummary, parent: RunSummary | None = None) -> str:
    """The run's command line as typed; for a child started as ``python -c`` (``sys.argv`` is then just
    ``-c``: a pytest-xdist worker, a multiprocessing child), what started it and the parent's command."""
    if run.argv != ["-c"] or parent is None:
        return " ".join(run.argv)
    pytest = any(Path(word).name in ("pytest", "py.test") or word == "pytest" for word in parent.argv[:3])
    what = "pytest-xdist worker" if pytest else "python -c child"
    return f"{what} of run {parent.id}: {' '.join(parent.argv)}"


def print_tests(rows: list[TestSummary]) -> None:
    """``ls --test`` without a pattern: each pytest test that launched kernels, most recent first."""
    from rich import box
    from rich.table import Table

    console = render.out()
    if not rows:
        console.print("no launches made by pytest tests match", style="dim")
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("test")  # node ids fold only at their spaces (parametrized ids)
    for name in ("launches", "kernels", "errors", "oob lanes", "last launch"):
        table.add_column(name, justify="right", no_wrap=True)
    for t in rows:
        table.add_row(
            render.cell(t.nodeid),
            render.cell(render.count(t.launches)),
            render.cell(render.count(t.kernels)),
            render.cell(render.count(t.errors), "red" if t.errors else ""),
            render.cell(render.count(t.oob_lanes), "bold red" if t.oob_lanes else ""),
            render.cell(t.last_launch),
        )
    render.fit(console, table)
    console.print(table)
