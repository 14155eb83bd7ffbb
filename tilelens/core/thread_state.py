"""Each thread's interception state, read on every intercepted launch.

The class attributes are every thread's defaults: a thread that never set one reads the default by a plain
lookup. (``getattr(threading.local(), name, default)`` for a name the thread never set raises and catches an
AttributeError inside: about 0.6 µs, paid two or three times per launch of a compiled recording.)

Invariant: only ``tilelens.core.interpreter`` sets these, and it puts back what it changed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilelens.core.bounds import RecordedReads
    from tilelens.core.interpreter import LaunchContext


class ThreadState(threading.local):
    launch: LaunchContext | None = (
        None  # the ``LaunchContext`` of the interpreted launch running on this thread, if any
    )
    reads: RecordedReads | None = (
        None  # ``bounds.RecordedReads`` fed back to interpreted launches started here (a CPU replay)
    )
    bench_depth: int = 0  # > 0 inside an autotuner's benchmark of one config (a trial launch)


LOCAL = ThreadState()
