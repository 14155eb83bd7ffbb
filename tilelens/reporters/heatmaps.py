"""``write_heatmaps``: a launch's heatmaps to a PNG or SVG file, the format named by the file's suffix."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tilelens.errors import UsageError
from tilelens.reporters.heatmap_layout import Layout, layout
from tilelens.reporters.palette import check_mode

if TYPE_CHECKING:
    from tilelens.store.heatmaps import LaunchHeatmaps

FORMATS = (".png", ".svg")


def heatmap_layout(maps: LaunchHeatmaps, *, title: str | None = None, by: str = "access") -> Layout:
    shown = title if title is not None else f"launch {maps.launch_id}"
    if not maps.trace:
        shown += " (no access trace recorded)"
    return layout(maps, shown, check_mode(by))


def write_heatmaps(
    maps: LaunchHeatmaps, path: str | Path, *, title: str | None = None, by: str = "access"
) -> Layout:
    """Draw ``maps`` into ``path`` (``.png`` or ``.svg``); returns the layout (where each cell was drawn)."""
    suffix = Path(path).suffix.lower()
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
