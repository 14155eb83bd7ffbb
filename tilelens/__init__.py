"""TileLens: a record/replay trace database for Triton kernels.

The public names load on first use (PEP 562): ``tilelens.record`` needs torch and Triton, which take seconds
to import, while the read commands (``tilelens ls``, ``show``, ``sql``) must answer in a fraction of that
and import ``tilelens`` only as the package their modules live in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from tilelens.api import (
        GluonTrace,
        History,
        OutOfBoundsError,
        Recording,
        TritonTrace,
        open_history,
        open_query,
        record,
        replay_launch,
        trace,
    )

__all__ = [
    "GluonTrace",
    "History",
    "OutOfBoundsError",
    "Recording",
    "TritonTrace",
    "__version__",
    "open_history",
    "open_query",
    "record",
    "replay_launch",
    "trace",
]
_LAZY = set(__all__) - {"__version__"}


# Names whose home needs neither torch nor Triton are loaded from there, not through tilelens.api.
_LIGHT_HOMES = {"open_query": "tilelens.query"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LIGHT_HOMES.get(name, "tilelens.api")), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'tilelens' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
