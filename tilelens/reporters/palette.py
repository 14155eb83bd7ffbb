"""The colours of a heatmap cell, shared by the PNG and SVG renderers and the web app's script.

"access" mode colours a cell by its category (tilelens.store.read.heatmaps: the strongest fact of its lanes wins:
out of bounds, atomic, read and written, written, read, masked off); "program" mode colours cells that active
lanes touched by the first program that touched them (cycling through :data:`PROGRAM_COLORS`), and keeps the
category colour for the rest, out-of-bounds cells included, so the band past the end reads the same in both.
"count" mode colours a cell that active in-bounds lanes touched by how often its busiest element was accessed
(``Heatmap.peak``), in :data:`COUNT_BOUNDS` buckets on a light-to-dark ramp, and keeps the category colour
for the rest (untouched, masked off, out of bounds, past the end): a matmul tile read by every program of a
row shows as that count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tilelens.store.read.heatmaps import (
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
    from tilelens.store.read.heatmaps import Heatmap

MODES = ("access", "count", "program")

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
# Lower bounds of the count buckets: 1, 2, 3-4, 5-8, ..., 65 or more accesses to one element.
COUNT_BOUNDS = (1, 2, 3, 5, 9, 17, 33, 65)


def _ramp(n: int) -> tuple[str, ...]:
    """``n`` colours from pale green through teal to dark navy, evenly spaced (each step tells apart)."""
    anchors = ((0xD9, 0xF0, 0xC8), (0x3A, 0x9F, 0xBF), (0x14, 0x1E, 0x5A))
    out = []
    for i in range(n):
        t = i / (n - 1) * (len(anchors) - 1)
        k = min(int(t), len(anchors) - 2)
        f = t - k
        r, g, b = (round(a + (z - a) * f) for a, z in zip(anchors[k], anchors[k + 1]))
        out.append(f"#{r:02x}{g:02x}{b:02x}")
    return tuple(out)


COUNT_COLORS = _ramp(len(COUNT_BOUNDS))
BACKGROUND = "#ffffff"
INK = "#222222"


def rgb(color: str) -> tuple[int, int, int]:
    value = int(color.lstrip("#"), 16)
    return (value >> 16) & 255, (value >> 8) & 255, value & 255


def count_label(i: int) -> str:
    """The legend's words for count bucket ``i``."""
    low = COUNT_BOUNDS[i]
    if i + 1 == len(COUNT_BOUNDS):
        return f"{low} or more accesses"
    high = COUNT_BOUNDS[i + 1] - 1
    return (
        f"{low} access"
        if high == low == 1
        else f"{low} accesses"
        if high == low
        else f"{low}-{high} accesses"
    )


def count_bucket(peak: np.ndarray) -> np.ndarray:
    """Each count's bucket index (0 for 1 access; counts under 1 land in 0 too: callers mask them)."""
    return np.maximum(np.searchsorted(COUNT_BOUNDS, peak, side="right") - 1, 0)


def legend(mode: str, top: int = 0) -> list[tuple[str, str]]:
    """(colour, label) pairs a picture's legend shows; ``top``: the highest count drawn ("count" mode lists
    its buckets up to that one's)."""
    shown = (READ, WRITE, READ_WRITE, ATOMIC) if mode == "access" else ()
    items = [(CATEGORY_COLORS[c], CATEGORY_NAMES[c]) for c in shown]
    if mode == "program":
        items.append((PROGRAM_COLORS[0], "first program 0, 1, 2, ... (colours cycle)"))
    if mode == "count":
        last = int(count_bucket(np.array([max(1, top)]))[0])
        items += [(COUNT_COLORS[i], count_label(i)) for i in range(last + 1)]
    items += [(CATEGORY_COLORS[c], CATEGORY_NAMES[c]) for c in (MASKED, UNTOUCHED, OOB, BAND)]
    return items


def cell_colors(h: Heatmap, mode: str) -> np.ndarray:
    """Every cell's colour as a ``(rows, cols)`` array of indices into :func:`color_table` (``mode``'s)."""
    category = h.categories().astype(np.int64)
    if mode == "access":
        return category
    if mode == "count":
        counted = (h.peak > 0) & (category != OOB)
        by_count = len(CATEGORY_COLORS) + len(PROGRAM_COLORS) + count_bucket(h.peak)
        return np.where(counted, by_count, category)
    active = (h.reads + h.writes + h.atomics) > 0
    by_program = len(CATEGORY_COLORS) + np.where(h.program >= 0, h.program, 0) % len(PROGRAM_COLORS)
    return np.where(active & (category != OOB), by_program, category)


def color_table() -> list[str]:
    """Colours by index: the categories', then the programs', then the counts'."""
    return (
        [CATEGORY_COLORS[c] for c in range(len(CATEGORY_COLORS))] + list(PROGRAM_COLORS) + list(COUNT_COLORS)
    )


def check_mode(mode: str) -> str:
    from tilelens.errors import UsageError

    if mode not in MODES:
        raise UsageError(f"heatmap colouring must be one of {', '.join(MODES)}, not {mode!r}")
    return mode
