"""The public Python API; the command line is a thin layer over these functions."""

from __future__ import annotations

from tilelens.core.recorder import Recording, record
from tilelens.core.trace import GluonTrace, TritonTrace, trace

__all__ = ["GluonTrace", "Recording", "TritonTrace", "record", "trace"]
