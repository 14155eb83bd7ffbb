"""TileLens: a record/replay trace database for Triton kernels."""

from __future__ import annotations

__version__ = "0.1.0"

from tilelens.api import Recording, TritonTrace, record, trace  # noqa: E402

__all__ = ["Recording", "TritonTrace", "__version__", "record", "trace"]
