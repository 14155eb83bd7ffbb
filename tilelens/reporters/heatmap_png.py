"""A heatmap picture as PNG, drawn with matplotlib at a fixed size: one figure pixel per image pixel.

The cells and legend swatches are painted into one RGB array (numpy, exact pixels as
:mod:`tilelens.reporters.heatmap_layout` places them) and put on the figure unscaled (``figimage``); only the
text goes through matplotlib's text rendering, on lines no cell shares. matplotlib is imported here, when a
picture is drawn, and never by the commands that draw none.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tilelens.reporters.heatmap_layout import SWATCH, TICKS, Layout
from tilelens.reporters.palette import BACKGROUND, INK, cell_colors, color_table, rgb

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100


def pixels(lay: Layout) -> np.ndarray:
    """The picture without its text: ``(height, width, 3)`` uint8."""
    canvas = np.empty((lay.height, lay.width, 3), dtype=np.uint8)
    canvas[:] = rgb(BACKGROUND)
    table = np.array([rgb(c) for c in color_table()], dtype=np.uint8)
    for p in lay.panels:
        colors = table[cell_colors(p.heatmap, lay.mode)]
        block = np.repeat(np.repeat(colors, p.cell, axis=0), p.cell, axis=1)
        canvas[p.y : p.y + block.shape[0], p.x : p.x + block.shape[1]] = block
    for i, (color, _) in enumerate(lay.legend):
        top = lay.legend_y + i * (SWATCH + 6)
        canvas[top : top + SWATCH, 12 : 12 + SWATCH] = rgb(color)
    return canvas


def figure(lay: Layout) -> Figure:
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state

    fig = Figure(figsize=(lay.width / DPI, lay.height / DPI), dpi=DPI, facecolor=BACKGROUND)
    fig.figimage(pixels(lay), xo=0, yo=0, origin="upper")

    def text(x: int, top: int, value: str, size: float = 9, weight: str = "normal", ha: str = "left") -> None:
        # Pixel coordinates from the top left, as the layout's; matplotlib's figure fractions go upwards.
        fig.text(x / lay.width, 1 - top / lay.height, value, fontsize=size, color=INK, weight=weight,
                 va="top", ha=ha, family="DejaVu Sans")  # fmt: skip

    text(12, 8, lay.title, 11, "bold")
    for p in lay.panels:
        text(12, p.caption_y + 4, p.caption)
        for c, label in p.col_ticks:  # above the grid, left-aligned on the labelled cell
            text(p.x + c * p.cell, p.y - TICKS + 2, label, 7)
        for r, label in p.row_ticks:  # in the left margin, right-aligned against the grid
            text(p.x - 4, p.y + r * p.cell, label, 7, ha="right")
    for i, (_, label) in enumerate(lay.legend):
        text(12 + SWATCH + 8, lay.legend_y + i * (SWATCH + 6) - 1, label)
    return fig


def write_png(lay: Layout, path: str | Path) -> None:
    figure(lay).savefig(path, format="png", dpi=DPI, facecolor=BACKGROUND)
