"""The public Python API; the command line is a thin layer over these functions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tilelens.core.bounds import OutOfBoundsError
from tilelens.core.recorder import Recording, record
from tilelens.core.trace import GluonTrace, TritonTrace, trace
from tilelens.replay import replay_launch
from tilelens.store import History


def open_history(db: str | None = None, blobs: str | Path | None = None) -> History:
    """The history at ``db``/``blobs`` (default ``./.tilelens``), created or upgraded to the current schema."""
    return History.open(db, blobs)


def open_query(db: str | None = None, blobs: str | Path | None = None) -> Any:
    """Read-only access for listings and launch details (``tilelens ls`` / ``show`` from Python)."""
    from tilelens.query import open_query as _open_query

    return _open_query(db, blobs)


__all__ = [
    "GluonTrace",
    "History",
    "OutOfBoundsError",
    "Recording",
    "TritonTrace",
    "open_history",
    "open_query",
    "record",
    "replay_launch",
    "trace",
]
