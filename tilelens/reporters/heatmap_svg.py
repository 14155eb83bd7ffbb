"""A heatmap picture as SVG, written directly: one ``<rect>`` per cell, with what it holds.

The geometry is :mod:`tilelens.reporters.heatmap_layout`'s, as the PNG's. Each cell carries ``data-row``,
``data-col`` and a ``<title>`` (a browser's tooltip): the elements it covers, the lanes that read, wrote,
updated it atomically, were masked off or out of bounds there, and the first program, kind and line. Every
string from the history (argument names, the kernel's name) is XML-escaped.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape as _escape
from xml.sax.saxutils import quoteattr as _quoteattr

import numpy as np

from tilelens.reporters.heatmap_layout import SWATCH, Layout, Panel
from tilelens.reporters.palette import BACKGROUND, INK, cell_colors, color_table

if TYPE_CHECKING:
    from collections.abc import Iterator

# Characters XML 1.0 cannot hold even escaped (C0 controls but tab and newline, DEL too for readability).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def _printable(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def escape(text: str) -> str:
    """``text`` as XML character data: markup escaped, control characters written as ``\\xNN``."""
    return _escape(_printable(text))


def quoteattr(text: str) -> str:
    return _quoteattr(_printable(text))


def cell_text(p: Panel, row: int, col: int, grid: tuple[int, int, int], kinds: tuple[str, ...]) -> str:
    """What one cell holds, in words (the SVG tooltip; the web page's hover says the same)."""
    h = p.heatmap
    first = (row * h.bin_rows) * h.elements_per_row + col * h.bin_cols
    if h.inside[row, col]:
        where = f"element {first}"
        if len(h.shape) > 1:  # and its index in the tensor's own dimensions
            where += " [" + ", ".join(str(int(i)) for i in np.unravel_index(first, h.shape)) + "]"
    else:
        where = f"past the end +{first - h.numel}"
    text = where if h.bin_rows == h.bin_cols == 1 else f"{where} (cell of {h.bin_rows}x{h.bin_cols})"
    counts = [
        f"{name} {int(a[row, col])}"
        for name, a in (
            ("reads", h.reads),
            ("writes", h.writes),
            ("atomics", h.atomics),
            ("masked", h.masked),
            ("oob", h.oob),
        )  # fmt: skip
        if a[row, col]
    ]
    if counts:
        text += ": " + ", ".join(counts)
    if (h.bin_rows > 1 or h.bin_cols > 1) and h.peak[row, col]:
        text += f"; busiest element {int(h.peak[row, col])} accesses" + ("" if h.peak_exact else " (mean)")
    program = int(h.program[row, col])
    if program >= 0:
        gx, gy = grid[0], grid[1]
        pid = (program % gx, program // gx % gy, program // (gx * gy))
        kind = kinds[int(h.kind[row, col])] if h.kind[row, col] >= 0 else "?"
        text += f"; first program ({pid[0]}, {pid[1]}, {pid[2]}), {kind} at line {int(h.line[row, col])}"
    return text


def svg_lines(lay: Layout, grid: tuple[int, int, int], kinds: tuple[str, ...]) -> Iterator[str]:
    yield (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{lay.width}" height="{lay.height}" '
        f'viewBox="0 0 {lay.width} {lay.height}" font-family="DejaVu Sans, sans-serif" font-size="12">'
    )
    yield f'<rect width="{lay.width}" height="{lay.height}" fill="{BACKGROUND}"/>'
    yield f'<text x="12" y="26" font-weight="bold" font-size="14" fill="{INK}">{escape(lay.title)}</text>'
    table = color_table()
    for p in lay.panels:
        h = p.heatmap
        yield f'<g class="heatmap" data-arg={quoteattr(h.name)} data-position="{h.position}">'
        yield f'<text x="12" y="{p.caption_y + 16}" fill="{INK}">{escape(p.caption)}</text>'
        for c, label in p.col_ticks:
            yield f'<text class="col-tick" x="{p.x + c * p.cell}" y="{p.y - 3}" font-size="9" fill="{INK}">{label}</text>'
        for r, label in p.row_ticks:
            yield (
                f'<text class="row-tick" x="{p.x - 4}" y="{p.y + r * p.cell + 9}" font-size="9" '
                f'text-anchor="end" fill="{INK}">{label}</text>'
            )
        colors = cell_colors(h, lay.mode)
        for r in range(h.grid_rows):
            for c in range(h.cols):
                yield (
                    f'<rect x="{p.x + c * p.cell}" y="{p.y + r * p.cell}" width="{p.cell}" height="{p.cell}" '
                    f'fill="{table[int(colors[r, c])]}" data-row="{r}" data-col="{c}">'
                    f"<title>{escape(cell_text(p, r, c, grid, kinds))}</title></rect>"
                )
        yield "</g>"
    for i, (color, label) in enumerate(lay.legend):
        top = lay.legend_y + i * (SWATCH + 6)
        yield f'<rect class="legend" x="12" y="{top}" width="{SWATCH}" height="{SWATCH}" fill="{color}"/>'
        yield f'<text x="{12 + SWATCH + 8}" y="{top + SWATCH - 1}" fill="{INK}">{escape(label)}</text>'
    yield "</svg>"


def svg_text(lay: Layout, grid: tuple[int, int, int], kinds: tuple[str, ...]) -> str:
    return "\n".join(svg_lines(lay, grid, kinds)) + "\n"


def write_svg(lay: Layout, grid: tuple[int, int, int], kinds: tuple[str, ...], path: str | Path) -> None:
    Path(path).write_text(svg_text(lay, grid, kinds), encoding="utf-8")
