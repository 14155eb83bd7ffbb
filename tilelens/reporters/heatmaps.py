"""``write_heatmaps``: a launch's heatmaps to a PNG or SVG file, the format named by the file's suffix."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tilelens.errors import UsageError
from tilelens.reporters.heatmap_layout import Layout, layout
from tilelens.reporters.palette import check_mode

if TYPE_CHECKING:
    from tilelens.store.read.heatmaps import LaunchHeatmaps

FORMATS = (".png", ".svg")
# Cells per argument each format draws before the data step bins elements together: a PNG pixel block is
# cheap, an SVG rect with its tooltip is ~600 bytes (16384 cells: about 10 MB of SVG).
MAX_CELLS = {".png": 1 << 18, ".svg": 1 << 14}


def max_cells_for(path: str | Path) -> int:
    """How many cells per argument a picture at ``path`` should have (pass to ``launch_heatmaps``)."""
    return MAX_CELLS.get(_suffix(path), MAX_CELLS[".png"])


def _suffix(path: str | Path) -> str:
    return Path(path).suffix.lower()


def heatmap_layout(maps: LaunchHeatmaps, *, title: str | None = None, by: str = "access") -> Layout:
    shown = title if title is not None else f"launch {maps.launch_id}"
    if not maps.trace:
        shown += " (no access trace recorded)"
    return layout(maps, shown, check_mode(by))


def write_heatmaps(
    maps: LaunchHeatmaps, path: str | Path, *, title: str | None = None, by: str = "access"
) -> Layout:
    """Draw ``maps`` into ``path`` (``.png`` or ``.svg``); returns the layout (where each cell was drawn)."""
    suffix = _suffix(path)
    if suffix not in FORMATS:
        raise UsageError(f"a heatmap file ends in {' or '.join(FORMATS)}, not {Path(path).name!r}")
    lay = heatmap_layout(maps, title=title, by=by)
    try:
        if suffix == ".png":
            from tilelens.reporters.heatmap_png import write_png

            write_png(lay, path)
        else:
            from tilelens.reporters.heatmap_svg import write_svg

            write_svg(lay, maps.grid, maps.kinds, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return lay
