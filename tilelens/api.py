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
    from tilelens.store.write.history import History, HistoryStatus

# Name -> the module that defines it.
_HOMES: dict[str, str] = {
    # recording: torch and Triton
    "Recording": "tilelens.core.recording.recording",
    "record": "tilelens.core.recording.recording",
    "GluonTrace": "tilelens.core.interpreted.trace",
    "TritonTrace": "tilelens.core.interpreted.trace",
    "trace": "tilelens.core.interpreted.trace",
    "OutOfBoundsError": "tilelens.errors",  # raised into the program under on_oob="raise"
    # reading: neither torch, Triton nor Alembic (see tilelens.store.read.query)
    "EXPORT_FORMATS": "tilelens.store.read.query",
    "HistoryQuery": "tilelens.store.read.query",
    "open_query": "tilelens.store.read.query",
    "AccessStats": "tilelens.store.read.results",
    "ArgumentInfo": "tilelens.store.read.results",
    "ExportResult": "tilelens.store.read.results",
    "DatasetExport": "tilelens.store.read.results",
    "LaunchDetail": "tilelens.store.read.results",
    "LaunchSummary": "tilelens.store.read.results",
    "RunSummary": "tilelens.store.read.results",
    "TestSummary": "tilelens.store.read.results",
    "Heatmap": "tilelens.store.read.heatmaps",
    "LaunchHeatmaps": "tilelens.store.read.heatmaps",
    "launch_heatmaps": "tilelens.store.read.heatmaps",
    "launch_events": "tilelens.store.read.heatmap_events",
    "program_cells": "tilelens.store.read.heatmap_events",
    "write_heatmaps": "tilelens.reporters.heatmaps",  # matplotlib for PNG, when called
    "max_cells_for": "tilelens.reporters.heatmaps",
    "write_report": "tilelens.reporters.report",  # a run as static HTML (tilelens report --html)
    "Report": "tilelens.reporters.report",
    "KernelVersion": "tilelens.store.read.kernels",
    "kernel_versions": "tilelens.store.read.kernels",
    "diff_launches": "tilelens.store.read.diff",
    "LaunchDiff": "tilelens.store.read.diff",
    "diff_versions": "tilelens.store.read.versiondiff",
    "VersionDiff": "tilelens.store.read.versiondiff",
    "TensorDiff": "tilelens.store.files.tensordiff",
    "TableInfo": "tilelens.store.read.catalog",
    # checking traces for races, hazards and out-of-bounds lanes: numpy and pyarrow, neither torch nor Triton
    "check_launches": "tilelens.analysis.check",
    "FINDING_KINDS": "tilelens.analysis.findings",
    "Finding": "tilelens.analysis.findings",
    "LaunchCheck": "tilelens.analysis.findings",
    "parse_finding_kinds": "tilelens.analysis.findings",
    "check_lines": "tilelens.reporters.check",
    "check_summary": "tilelens.reporters.check",
    # coverage of kernels' lines and masks over launches: numpy and pyarrow, neither torch nor Triton
    "coverage": "tilelens.analysis.coverage",
    "CoverageReport": "tilelens.analysis.coverage",
    "KernelCoverage": "tilelens.analysis.coverage",
    "coverage_lines": "tilelens.reporters.coverage",
    "write_coverage_html": "tilelens.reporters.coverage_html",
    # writing, migrating, replaying: Alembic; replays also torch and Triton
    "History": "tilelens.store.write.history",
    "HistoryStatus": "tilelens.store.write.history",
    "newest_run": "tilelens.store.read.launches",
    "copy_history": "tilelens.store.admin.copy",
    "open_copy_source": "tilelens.store.admin.copy",
    "check_blob_folder": "tilelens.store.files.blobs",
    "CopyReport": "tilelens.store.admin.copy",
    "run_tree": "tilelens.store.admin.tree",
    "grant_reader": "tilelens.store.admin.roles",
    "grant_reader_sql": "tilelens.store.admin.roles",
    "TreeSummary": "tilelens.store.admin.tree",
    "select_launches": "tilelens.store.read.launches",
    "replay_launch": "tilelens.replay.engine",
    "replay_launches": "tilelens.replay.engine",
    "ReplayResult": "tilelens.replay.result",
    "write_repro": "tilelens.replay.repro",  # a standalone reproducer folder
    "replay_with_python": "tilelens.replay.repro",  # another interpreter (another Triton) through it
    "derive_trace": "tilelens.replay.derive",  # access traces of compiled launches, on demand
    "derive_traces": "tilelens.replay.derive",
    # cleaning up
    "collect_garbage": "tilelens.store.admin.gc",
    "GcReport": "tilelens.store.admin.gc",
    "gc_cutoff": "tilelens.store.admin.gc",
    "gc_duration": "tilelens.store.admin.gc",
    "describe_environment": "tilelens.environment",
    "Environment": "tilelens.environment",
    "__version__": "tilelens.version",
    "versions": "tilelens.version",
}


def open_history(
    db: str | None = None, blobs: str | Path | None = None, *, location: Location | None = None
) -> History:
    """The history at ``db``/``blobs`` (resolved as everywhere), created or upgraded to the current schema."""
    from tilelens.store.write.history import History

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
    from tilelens.store.write.history import History

    return History.open_existing(db, blobs, location=location, read_only=read_only)


def inspect_history(
    db: str | None = None, blobs: str | Path | None = None, *, location: Location | None = None
) -> HistoryStatus:
    """Where the history is, its schema revision and row counts; creates and migrates nothing."""
    from tilelens.config import resolve_location
    from tilelens.store.write.history import inspect_history as inspect

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
