"""Which recording, if any, receives launches right now, and which pytest test is running.

The recording slot is set when a ``tilelens.record()`` block is entered and cleared when it ends, so nothing
here outlives a recording. Launches outside any recording (a kernel wrapped with ``tilelens.trace``) go to the
wrapper's own in-memory sink instead.

``nodeid`` is the pytest test running right now, so that each launch records which test made it: set by the
pytest plugin (:mod:`tilelens.pytest_plugin`) around each test's setup, call and teardown, read by the recorders
when a launch is recorded. A plain module global, not a context variable: a test's kernels may launch from
threads the test started, and pytest runs one test at a time per process. This module imports only the
ground floor, so the plugin costs nothing in a pytest session that records nothing.
"""

from __future__ import annotations

import threading
from typing import Any, Literal, Protocol

from tilelens.errors import StateError
from tilelens.records import AutotuneEvent, LaunchRecord

AutotunePolicy = Literal["first", "all"]


class Sink(Protocol):
    autotune_policy: AutotunePolicy

    @property
    def on_oob(self) -> str:
        """What a launch with out-of-bounds lanes does: "record" or "raise" (tilelens.core.engine.bounds)."""

    def write_launch(self, rec: LaunchRecord) -> Any:
        """Persist (or queue) a launch; the returned handle identifies it to ``write_autotune_event``."""

    def write_autotune_event(self, event: AutotuneEvent, launch: Any) -> None: ...


_lock = threading.Lock()
_active: list[Sink] = []
nodeid: str | None = None  # the pytest test running now (``set_nodeid``); read on every recorded launch


def set_nodeid(value: str | None) -> None:
    global nodeid
    nodeid = value


def active() -> Sink | None:
    return _active[-1] if _active else None


def activate(sink: Sink) -> None:
    with _lock:
        if _active:
            raise StateError("TileLens: a recording is already active in this process; nest nothing")
        _active.append(sink)


def deactivate(sink: Sink) -> None:
    with _lock:
        if _active and _active[-1] is sink:
            _active.pop()
