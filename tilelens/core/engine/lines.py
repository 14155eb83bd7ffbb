"""Which source lines of a kernel function ran in one interpreted launch (``record --coverage``).

Memory traces know only the lines that load, store or update memory; coverage also needs arithmetic,
branches and loops, so while the kernel's Python function runs, the line events of exactly its code object
are watched:

* Python 3.12 and later: ``sys.monitoring`` LINE events, local to that code object (every other frame runs at
  full speed), under a tool id of TileLens's own (3 or 4, the ids PEP 669 leaves to others: a debugger, a
  coverage tool or a profiler keeps its id);
* Python 3.10 and 3.11: ``sys.settrace`` for the call only, a global tracer that gives a local one to that
  code object's frame alone. A tracer already set (a debugger, coverage.py) wins: no lines are captured then,
  and the launch says why.

Invariants: capture never changes what the kernel computes and never raises into the program (a failure to
start or stop it is noted in ``failure`` and the launch then has no line data); lines are absolute line
numbers of the kernel's file, as the access trace's ``line`` column; ``discard`` forgets a batched attempt's
lines when it falls back (the per-program runs that follow see the lines again).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import Any

# sys.monitoring ids no convention assigns (0, 1, 2, 5: debugger, coverage, profiler, optimizer).
_TOOL_IDS = (4, 3)
_TOOL_NAME = "tilelens-coverage"


class LineCapture:
    """The lines one launch's kernel function executed (``lines``), gathered over every call it makes."""

    def __init__(self) -> None:
        self.lines: set[int] = set()
        self.failure: str | None = None  # why some call ran without capture (then ``result`` is None)

    def result(self) -> list[int] | None:
        """The sorted lines, or None when capture failed for any call of the launch (the set is partial)."""
        return None if self.failure is not None else sorted(self.lines)

    def discard(self) -> None:
        """Forget every line so far: the batched attempt that saw them gave up (and is rerun per program)."""
        self.lines.clear()

    @contextlib.contextmanager
    def watching(self, code: CodeType) -> Iterator[None]:
        """Capture ``code``'s line events for the block; exceptions of the block pass through unchanged."""
        if self.failure is not None:  # already partial: nothing more is worth its cost
            yield
            return
        stop = self._start(code)
        try:
            yield
        finally:
            if stop is not None:
                try:
                    stop()
                except Exception as exc:  # noqa: BLE001 - capture must never break the recorded program
                    self.failure = f"line capture did not stop cleanly: {type(exc).__name__}: {exc}"

    def _start(self, code: CodeType) -> Any:
        try:
            if hasattr(sys, "monitoring"):
                return self._start_monitoring(code)
            return self._start_settrace(code)
        except Exception as exc:  # noqa: BLE001 - capture must never break the recorded program
            self.failure = f"line capture failed: {type(exc).__name__}: {exc}"
            return None

    def _start_monitoring(self, code: CodeType) -> Any:
        mon: Any = sys.monitoring  # type: ignore[attr-defined,unused-ignore]  # Python >= 3.12
        tool = next((t for t in _TOOL_IDS if mon.get_tool(t) is None), None)
        if tool is None:
            self.failure = "line capture unavailable: sys.monitoring tool ids 3 and 4 are both in use"
            return None
        mon.use_tool_id(tool, _TOOL_NAME)
        add = self.lines.add
        line_event = mon.events.LINE

        def on_line(_code: CodeType, line: int) -> None:
            add(line)

        try:
            mon.register_callback(tool, line_event, on_line)
            mon.set_local_events(tool, code, line_event)
        except BaseException:
            mon.free_tool_id(tool)
            raise

        def stop() -> None:
            try:
                mon.set_local_events(tool, code, 0)
                mon.register_callback(tool, line_event, None)
            finally:
                mon.free_tool_id(tool)

        return stop

    def _start_settrace(self, code: CodeType) -> Any:
        if sys.gettrace() is not None:
            self.failure = "line capture unavailable: another tracer (a debugger or coverage tool) is active"
            return None
        add = self.lines.add

        def local(frame: FrameType, event: str, _arg: Any) -> Any:
            if event == "line":
                add(frame.f_lineno)
            return local

        def scope(frame: FrameType, _event: str, _arg: Any) -> Any:
            return local if frame.f_code is code else None

        sys.settrace(scope)

        def stop() -> None:
            if sys.gettrace() is scope:  # the kernel cannot set one, but never remove another's tracer
                sys.settrace(None)

        return stop
