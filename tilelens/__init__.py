"""TileLens: a record/replay trace database for Triton kernels.

The public names are those of :mod:`tilelens.api` and load on first use (PEP 562): ``tilelens.record`` needs
torch and Triton, which take seconds to import, while the read commands (``tilelens ls``, ``show``, ``sql``)
must answer in a fraction of that and import ``tilelens`` only as the package their modules live in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tilelens.version import __version__

if TYPE_CHECKING:
    from tilelens.api import (
        GluonTrace,
        History,
        OutOfBoundsError,
        Recording,
        TritonTrace,
        check_launches,
        derive_trace,
        derive_traces,
        inspect_history,
        open_history,
        open_query,
        record,
        replay_launch,
        replay_launches,
        select_launches,
        trace,
        versions,
    )

__all__ = [
    "GluonTrace",
    "History",
    "OutOfBoundsError",
    "Recording",
    "TritonTrace",
    "__version__",
    "check_launches",
    "derive_trace",
    "derive_traces",
    "inspect_history",
    "open_history",
    "open_query",
    "record",
    "replay_launch",
    "replay_launches",
    "select_launches",
    "trace",
    "versions",
]
_LAZY = set(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module("tilelens.api"), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'tilelens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
