"""The pytest test running right now, so that each launch records which test made it.

Set by the pytest plugin (:mod:`tilelens.pytest_plugin`) around each test's setup, call and teardown and read
by the recorder when a launch is written. A plain module global, not a context variable: a test's kernels may
launch from threads the test started, and pytest runs one test at a time per process. Imports nothing, so the
plugin costs nothing in a pytest session that records nothing.
"""

from __future__ import annotations

_current: str | None = None


def current() -> str | None:
    return _current


def set_current(nodeid: str | None) -> None:
    global _current
    _current = nodeid
