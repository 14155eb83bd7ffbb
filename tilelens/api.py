"""The public Python API: what ``import tilelens`` offers, and the only door the command line goes through.

Every ``tilelens`` command calls these names and nothing below them (capture in ``core``, the on-disk format in
``store``, ``replay``), so what the CLI does, a program can do with the same calls.

Names load on first use (PEP 562): recording needs torch and Triton, which take seconds to import, and opening a
history for writing needs Alembic, while the read commands (``ls``, ``show``, ``sql``) must answer in a fraction
of that. Importing this module imports nothing else; each name imports its home module when first used.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tilelens.config import Location
    from tilelens.store.history import History, HistoryStatus

# Name -> the module that defines it.
_HOMES: dict[str, str] = {
    # recording: torch and Triton
    "Recording": "tilelens.core.recorder",
    "record": "tilelens.core.recorder",
    "GluonTrace": "tilelens.core.trace",
    "TritonTrace": "tilelens.core.trace",
    "trace": "tilelens.core.trace",
    "OutOfBoundsError": "tilelens.errors",  # raised into the program under on_oob="raise"
    # reading: neither torch, Triton nor Alembic (see tilelens.store.query)
    "EXPORT_FORMATS": "tilelens.store.query",
    "HistoryQuery": "tilelens.store.query",
    "open_query": "tilelens.store.query",
    "AccessStats": "tilelens.store.results",
    "ArgumentInfo": "tilelens.store.results",
    "ExportResult": "tilelens.store.results",
    "LaunchDetail": "tilelens.store.results",
    "LaunchSummary": "tilelens.store.results",
    "RunSummary": "tilelens.store.results",
    "Heatmap": "tilelens.store.heatmaps",
    "LaunchHeatmaps": "tilelens.store.heatmaps",
    "launch_heatmaps": "tilelens.store.heatmaps",
    "write_heatmaps": "tilelens.reporters.heatmaps",  # matplotlib for PNG, when called
    "max_cells_for": "tilelens.reporters.heatmaps",
    "KernelVersion": "tilelens.store.kernels",
    "kernel_versions": "tilelens.store.kernels",
    "diff_launches": "tilelens.store.diff",
    "LaunchDiff": "tilelens.store.diff",
    "diff_versions": "tilelens.store.versiondiff",
    "VersionDiff": "tilelens.store.versiondiff",
    "TensorDiff": "tilelens.store.tensordiff",
    "TableInfo": "tilelens.store.catalog",
    # writing, migrating, replaying: Alembic; replays also torch and Triton
    "History": "tilelens.store.history",
    "HistoryStatus": "tilelens.store.history",
    "newest_run": "tilelens.store.launches",
    "copy_history": "tilelens.store.copy",
    "CopyReport": "tilelens.store.copy",
    "run_tree": "tilelens.store.tree",
    "TreeSummary": "tilelens.store.tree",
    "select_launches": "tilelens.store.launches",
    "replay_launch": "tilelens.replay.engine",
    "replay_launches": "tilelens.replay.engine",
    "ReplayResult": "tilelens.replay.result",
    "derive_trace": "tilelens.replay.derive",  # access traces of compiled launches, on demand
    "derive_traces": "tilelens.replay.derive",
    # cleaning up (History.gc)
    "GcReport": "tilelens.store.gc",
    "gc_cutoff": "tilelens.store.gc",
    "gc_duration": "tilelens.store.gc",
    "__version__": "tilelens.version",
    "versions": "tilelens.version",
}


def open_history(
    db: str | None = None, blobs: str | Path | None = None, *, location: Location | None = None
) -> History:
    """The history at ``db``/``blobs`` (resolved as everywhere), created or upgraded to the current schema."""
    from tilelens.store.history import History

    return History.open(db, blobs, location=location)


def open_existing_history(
    db: str | None = None,
    blobs: str | Path | None = None,
    *,
    location: Location | None = None,
    read_only: bool = False,
) -> History:
    """The existing history at ``db``/``blobs``, at the current schema; creates and migrates nothing.

    ``read_only``: opened so that nothing at all is written (read-only media included).
    """
    from tilelens.store.history import History

    return History.open_existing(db, blobs, location=location, read_only=read_only)


def inspect_history(
    db: str | None = None, blobs: str | Path | None = None, *, location: Location | None = None
) -> HistoryStatus:
    """Where the history is, its schema revision and row counts; creates and migrates nothing."""
    from tilelens.config import resolve_location
    from tilelens.store.history import inspect_history as inspect

    return inspect(location or resolve_location(db, blobs))


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'tilelens.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


__all__ = sorted([*_HOMES, "inspect_history", "open_existing_history", "open_history"])


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
