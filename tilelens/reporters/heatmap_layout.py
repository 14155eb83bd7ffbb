"""Where everything of a heatmap picture goes, in pixels: shared by the PNG and SVG renderers.

A picture is a title line, then one panel per tensor argument (a caption line above a grid of square cells,
``cell`` pixels each, the band rows past the end included), then the legend. Coordinates are from the top
left; every cell is a whole number of pixels, so cell ``(r, c)`` of a panel covers exactly the pixels
``x + c*cell .. x + (c+1)*cell - 1`` and ``y + r*cell .. y + (r+1)*cell - 1``: tests and tools can find any
element's colour without reading the renderer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilelens.store.heatmaps import Heatmap, LaunchHeatmaps

MARGIN = 12
LINE = 22  # a line of text
GAP = 14  # between panels
SWATCH = 12
MAX_WIDTH = 960  # a panel's grid is at most this wide, unless a cell would be under one pixel
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
    notes = []
    if h.oob_outside:
        notes.append(f"{h.oob_outside} out-of-bounds lanes before the start or past the band")
    if h.masked_outside:
        notes.append(f"{h.masked_outside} masked-off lanes not drawn")
    if h.unmapped:
        notes.append(f"{h.unmapped} in-bounds lanes on no element")
    return text + ("; " + "; ".join(notes) if notes else "")


def layout(maps: LaunchHeatmaps, title: str, mode: str) -> Layout:
    from tilelens.reporters.palette import legend

    y = MARGIN + LINE
    panels = []
    width = max(MIN_WIDTH, 9 * len(title) + 2 * MARGIN)  # the bold title is wider than a caption
    for h in maps.heatmaps:
        cell = max(1, min(MAX_CELL, MAX_WIDTH // max(1, h.cols)))
        panel = Panel(h, caption(h), y, MARGIN, y + LINE, cell)
        panels.append(panel)
        width = max(width, panel.width + 2 * MARGIN, 7 * len(panel.caption) + 2 * MARGIN)
        y = panel.y + panel.height + GAP
    items = legend(mode)
    height = y + len(items) * (SWATCH + 6) + MARGIN
    return Layout(title, mode, width, height, panels, y, items)
