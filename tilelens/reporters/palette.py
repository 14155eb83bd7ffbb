"""The colours of a heatmap cell, shared by the PNG and SVG renderers and the web app's script.

"access" mode colours a cell by its category (tilelens.store.heatmaps: the strongest fact of its lanes wins:
out of bounds, atomic, read and written, written, read, masked off); "program" mode colours cells that active
lanes touched by the first program that touched them (cycling through :data:`PROGRAM_COLORS`), and keeps the
category colour for the rest, out-of-bounds cells included, so the band past the end reads the same in both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tilelens.store.heatmaps import (
    ATOMIC,
    BAND,
    CATEGORY_NAMES,
    MASKED,
    OOB,
    READ,
    READ_WRITE,
    UNTOUCHED,
    WRITE,
)

if TYPE_CHECKING:
    from tilelens.store.heatmaps import Heatmap

MODES = ("access", "program")

CATEGORY_COLORS: dict[int, str] = {
    UNTOUCHED: "#eeeeee",
    MASKED: "#a0a0a0",
    READ: "#3b75c4",
    WRITE: "#f08c2e",
    READ_WRITE: "#8a5cc9",
    ATOMIC: "#2e9e4f",
    OOB: "#d62728",
    BAND: "#fbe3e3",
}
PROGRAM_COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
    "#17becf", "#bcbd22", "#393b79", "#637939", "#8c6d31", "#7b4173",
)  # fmt: skip
BACKGROUND = "#ffffff"
INK = "#222222"


def rgb(color: str) -> tuple[int, int, int]:
    value = int(color.lstrip("#"), 16)
    return (value >> 16) & 255, (value >> 8) & 255, value & 255


def legend(mode: str) -> list[tuple[str, str]]:
    """(colour, label) pairs a picture's legend shows."""
    shown = (READ, WRITE, READ_WRITE, ATOMIC) if mode == "access" else ()
    items = [(CATEGORY_COLORS[c], CATEGORY_NAMES[c]) for c in shown]
    if mode == "program":
        items.append((PROGRAM_COLORS[0], "first program 0, 1, 2, ... (colours cycle)"))
    items += [(CATEGORY_COLORS[c], CATEGORY_NAMES[c]) for c in (MASKED, UNTOUCHED, OOB, BAND)]
    return items


def cell_colors(h: Heatmap, mode: str) -> np.ndarray:
    """Every cell's colour as a ``(rows, cols)`` array of indices into :func:`color_table` (``mode``'s)."""
    category = h.categories().astype(np.int64)
    if mode == "access":
        return category
    active = (h.reads + h.writes + h.atomics) > 0
    by_program = len(CATEGORY_COLORS) + np.where(h.program >= 0, h.program, 0) % len(PROGRAM_COLORS)
    return np.where(active & (category != OOB), by_program, category)


def color_table() -> list[str]:
    """Colours by index: the categories', then the programs'."""
    return [CATEGORY_COLORS[c] for c in range(len(CATEGORY_COLORS))] + list(PROGRAM_COLORS)


def check_mode(mode: str) -> str:
    from tilelens.errors import UsageError

    if mode not in MODES:
        raise UsageError(f"heatmap colouring must be one of {', '.join(MODES)}, not {mode!r}")
    return mode
