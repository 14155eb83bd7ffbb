"""Each thread's interception state, read on every intercepted launch.

The class attributes are every thread's defaults: a thread that never set one reads the default by a plain
lookup. (``getattr(threading.local(), name, default)`` for a name the thread never set raises and catches an
AttributeError inside: about 0.6 µs, paid two or three times per launch of a compiled recording.)

Invariant: only ``tilelens.core.interpreter`` sets these, and it puts back what it changed; every change goes
through ``NotifyingLocal`` (the compiled module keeps values it read until one is announced), and the class
defaults never change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tilelens.core.bounds import RecordedReads
    from tilelens.core.launch_context import LaunchContext


# Called after a ``NotifyingLocal`` attribute is set or deleted: the compiled module's ``locals_changed``
# once it is loaded (``native.load`` adds it), which lets its ``LocalDict`` give a value it read again
# without reading the thread's dict (native_common.h).
CHANGED: list[Callable[[], None]] = []


class NotifyingLocal(threading.local):
    """A ``threading.local`` that says so after each change of an attribute (``CHANGED``); reads are plain."""

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        for changed in CHANGED:
            changed()

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        for changed in CHANGED:
            changed()


class ThreadState(NotifyingLocal):
    launch: LaunchContext | None = (
        None  # the ``LaunchContext`` of the interpreted launch running on this thread, if any
    )
    reads: RecordedReads | None = (
        None  # ``bounds.RecordedReads`` fed back to interpreted launches started here (a CPU replay)
    )
    bench_depth: int = 0  # > 0 inside an autotuner's benchmark of one config (a trial launch)


LOCAL = ThreadState()
