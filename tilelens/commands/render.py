"""Text shared by the read commands: how times, grids, configs and counts look in a terminal.

Everything printed here comes from user programs (kernel names, source lines, error messages), so it is
wrapped in ``rich.text.Text`` and never parsed as rich markup: a ``[red]`` in a kernel's source stays text,
and its control characters are escaped (:mod:`tilelens.commands.escape`): ``text`` and ``cell`` are how
every command turns stored values into output.
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from tilelens.commands.escape import escape
from tilelens.records import PROBLEMS


def out() -> Console:
    """stdout; a pipe gets wide lines instead of rich's 80-column default, so tables are not squeezed."""
    width = None if sys.stdout.isatty() else 240
    return Console(file=sys.stdout, highlight=False, emoji=False, width=width, soft_wrap=False)


def err() -> Console:
    return Console(file=sys.stderr, highlight=False, emoji=False, soft_wrap=True)


def cell(value: Any, style: str = "") -> Text:
    """One value as a single line of text, control characters escaped (None is empty)."""
    return Text("" if value is None else escape(str(value)), style=style)


text = cell


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


def status(value: str, role: str = "launch") -> Text:
    shown = Text(escape(value), style="red" if value in PROBLEMS else "")
    if role != "launch":
        shown.append(f" ({escape(role)})", style="dim")
    return shown
