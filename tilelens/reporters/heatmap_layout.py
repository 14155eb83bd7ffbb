"""Where everything of a heatmap picture goes, in pixels: shared by the PNG and SVG renderers.

A picture is a title line, then one panel per tensor argument (a caption line, a line of column labels, and
a grid of square cells, ``cell`` pixels each, the band rows past the end included, with row labels in a
margin on its left), then the legend. Labels are element indices: a column label is the cell's first
element column, a row label its first element row (for a 1-D tensor folded into rows, the element offset the
row starts at); they are placed every 1, 2 or 5 x 10^k cells, the first such step that keeps them apart. Coordinates are from the top
left; every cell is a whole number of pixels, so cell ``(r, c)`` of a panel covers exactly the pixels
``x + c*cell .. x + (c+1)*cell - 1`` and ``y + r*cell .. y + (r+1)*cell - 1``: tests and tools can find any
element's colour without reading the renderer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilelens.store.read.heatmaps import Heatmap, LaunchHeatmaps

MARGIN = 12
LINE = 22  # a line of text
GAP = 14  # between panels
SWATCH = 12
MAX_WIDTH = 960  # a panel's grid is at most this wide, unless a cell would be under one pixel
MAX_HEIGHT = 720  # and at most this tall
AXIS = 44  # the row labels' margin
TICKS = 14  # the column labels' line
ROW_GAP = 14  # pixels between two row labels at least
COL_GAP = 40  # between two column labels' starts
MAX_CELL = 24
MIN_WIDTH = 420  # room for the legend


@dataclass
class Panel:
    heatmap: Heatmap
    caption: str
    caption_y: int  # baseline-free top of the caption line
    x: int  # top left of cell (0, 0)
    y: int
    cell: int  # pixels per cell side
    row_ticks: list[tuple[int, str]] = field(default_factory=list)  # (cell row, label)
    col_ticks: list[tuple[int, str]] = field(default_factory=list)  # (cell column, label)

    @property
    def width(self) -> int:
        return self.heatmap.cols * self.cell

    @property
    def height(self) -> int:
        return self.heatmap.grid_rows * self.cell

    def pixel(self, row: int, col: int) -> tuple[int, int]:
        """(x, y) of the centre pixel of cell (row, col)."""
        return self.x + col * self.cell + self.cell // 2, self.y + row * self.cell + self.cell // 2


@dataclass
class Layout:
    title: str
    mode: str
    width: int
    height: int
    panels: list[Panel] = field(default_factory=list)
    legend_y: int = 0
    legend: list[tuple[str, str]] = field(default_factory=list)


def caption(h: Heatmap) -> str:
    dims = "x".join(str(n) for n in h.shape) or "scalar"
    text = f"{h.name}  {h.dtype or ''} [{dims}]"
    if len(h.shape) == 1:
        text += f", rows of {h.elements_per_row}"
    if h.bin_rows > 1 or h.bin_cols > 1:
        text += f", one cell = {h.bin_rows}x{h.bin_cols} elements"
        text += " (counts: the busiest one's)" if h.peak_exact else " (counts: their mean, rounded up)"
    notes = []
    if h.oob_outside:
        notes.append(f"{h.oob_outside} out-of-bounds lanes before the start or past the band")
    if h.masked_outside:
        notes.append(f"{h.masked_outside} masked-off lanes not drawn")
    if h.unmapped:
        notes.append(f"{h.unmapped} in-bounds lanes on no element")
    return text + ("; " + "; ".join(notes) if notes else "")


def tick_step(cell: int, gap: int) -> int:
    """Cells between two labels: the first of 1, 2, 5, 10, 20, 50, ... at least ``gap`` pixels wide."""
    step = 1
    while step * cell < gap:
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2
    return step


def ticks(h: Heatmap, cell: int) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(row labels, column labels) of a heatmap drawn with ``cell``-pixel cells (the module docstring's rule)."""
    per_row = h.bin_rows * (h.elements_per_row if len(h.shape) <= 1 else 1)
    rows = [(r, str(r * per_row)) for r in range(0, h.rows, tick_step(cell, ROW_GAP))]
    cols = [(c, str(c * h.bin_cols)) for c in range(0, h.cols, tick_step(cell, COL_GAP))]
    return rows, cols


def layout(maps: LaunchHeatmaps, title: str, mode: str) -> Layout:
    from tilelens.reporters.palette import legend

    y = MARGIN + LINE
    panels = []
    width = max(MIN_WIDTH, 9 * len(title) + 2 * MARGIN)  # the bold title is wider than a caption
    for h in maps.heatmaps:
        cell = max(1, min(MAX_CELL, MAX_WIDTH // max(1, h.cols), MAX_HEIGHT // max(1, h.grid_rows)))
        panel = Panel(h, caption(h), y, MARGIN + AXIS, y + LINE + TICKS, cell, *ticks(h, cell))
        panels.append(panel)
        width = max(width, panel.x + panel.width + MARGIN, 7 * len(panel.caption) + 2 * MARGIN)
        y = panel.y + panel.height + GAP
    top = max((int(h.peak.max(initial=0)) for h in maps.heatmaps), default=0)
    items = legend(mode, top)
    height = y + len(items) * (SWATCH + 6) + MARGIN
    return Layout(title, mode, width, height, panels, y, items)
