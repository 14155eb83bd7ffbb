"""A recording: every Triton launch inside it is interpreted, recorded and written to a history.

``Recording`` is both the context manager behind ``tilelens.record()`` and the sink traced leaves write to.
It owns the interception patches for its lifetime and a per-recording cache of traced copies of the user's
kernels; when it ends, both are gone and the user's kernel objects are exactly as they were (the tuning state
shown on them meanwhile, ``interpreter.TuningMirror``, included).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from tilelens.core import compat, session
from tilelens.core.bounds import OobPolicy, resolve_policy
from tilelens.core.interpreter import TuningMirror, interception_patches
from tilelens.core.session import AutotunePolicy
from tilelens.core.trace import TritonTrace, trace_class
from tilelens.errors import UnsupportedError, UsageError
from tilelens.records import AutotuneEvent, LaunchRecord, RunInfo
from tilelens.version import versions


class Recording:
    """``with tilelens.record(...) as rec:`` — see ``tilelens.record`` for the options."""

    def __init__(
        self,
        db: str | None = None,
        blobs: str | Path | None = None,
        *,
        tag: str | None = None,
        autotune: AutotunePolicy = "first",
        argv: list[str] | None = None,
        history: Any = None,
        on_oob: OobPolicy | None = None,
    ) -> None:
        if autotune not in ("first", "all"):
            raise UsageError(f"autotune must be 'first' or 'all', not {autotune!r}")
        self.autotune_policy: AutotunePolicy = autotune
        self.on_oob: OobPolicy = resolve_policy(on_oob)
        self._db, self._blobs, self._tag = db, blobs, tag
        self._argv = list(sys.argv if argv is None else argv)
        self._history = history
        self._owns_history = history is None
        self.run_id: int | None = None
        self.launch_ids: list[int] = []
        self.launches_per_kernel: Counter[str] = Counter()
        self.errors = 0
        self.oob_lanes = 0
        self.oob_load_lanes = 0
        self.oob_store_lanes = 0  # stores and atomics
        self.dropped_lanes = 0  # store/atomic lanes outside every argument's memory, never written
        self.autotune_events = 0
        self._traced: dict[int, tuple[Any, TritonTrace]] = {}
        self._mirror = TuningMirror()
        self._lock = threading.Lock()
        self._patches: Any = None
        self._next_seq = 0
        self.on_launch: Any = None  # optional callback(record, launch_id), e.g. a live status line
        self.exit_code: int | None = None  # set by `tilelens record` to the program's exit status
        self.ended_by_signal: int | None = None  # set by `tilelens record`: SIGTERM/SIGHUP ended the program

    @property
    def history(self) -> Any:
        return self._history

    def __enter__(self) -> Recording:
        if not compat.SUPPORTED:
            raise UnsupportedError(f"TileLens supports Triton 3.6 to 3.9, found {compat.TRITON_VERSION}")
        if self._history is None:
            from tilelens.store import History

            self._history = History.open(self._db, self._blobs)
            self._history.blobs.check_writable()  # here, not at the first launch inside the user's program
        info = RunInfo(
            argv=self._argv, cwd=os.getcwd(), host=socket.gethostname(), versions=versions(), tag=self._tag
        )
        self.run_id = self._history.begin_run(info)
        session.activate(self)
        self._patches = interception_patches(self._route)
        try:
            self._patches.__enter__()
        except BaseException:
            session.deactivate(self)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._patches.__exit__(exc_type, exc, tb)
        finally:
            session.deactivate(self)
            self._traced.clear()
            self._mirror.restore()
            if exc_type is None:
                status = "ok" if not self.exit_code else "failed"
                if self.ended_by_signal is not None:
                    status = "terminated"
            else:
                status = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else "failed"
            try:
                if self.run_id is not None:
                    self._history.finish_run(self.run_id, status, self.exit_code)
            finally:
                if self._owns_history:
                    self._history.close()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Launches inside this block run as they would without TileLens, and are not recorded."""
        self._patches.__exit__(None, None, None)
        session.deactivate(self)
        try:
            yield
        finally:
            session.activate(self)
            self._patches = interception_patches(self._route)
            self._patches.__enter__()

    # -- routing launches -------------------------------------------------------------------------------

    def trace_for(self, kernel: Any) -> TritonTrace:
        """A traced copy of the user's kernel, made once per recording."""
        with self._lock:
            entry = self._traced.get(id(kernel))
            if entry is None or entry[0] is not kernel:
                entry = (kernel, trace_class(kernel)(kernel, in_place=False))
                self._traced[id(kernel)] = entry
            return entry[1]

    def _route(self, kernel: Any, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        traced = self.trace_for(kernel)
        kwargs = dict(kwargs)
        grid = kwargs.pop("grid", None)
        kwargs.pop("warmup", None)
        try:
            return traced.runner.run(*args, grid=grid, warmup=False, **kwargs)
        finally:
            # Programs read kernel.best_config after a launch: the user's autotuner shows its copy's choice.
            self._mirror.show(traced.source_layers, traced.layers)

    # -- sink -------------------------------------------------------------------------------------------

    def write_launch(self, rec: LaunchRecord) -> int:
        """Persist one launch before its launch returns to the program.

        Synchronously, on purpose: a background writer thread was measured (scripts/bench.py) to make small
        launches slower, not faster. Its Python half (row building, SQLAlchemy) competes for the GIL with
        the interpreter, and its GIL-free half (hashing, fsync) is a few milliseconds that it could not hide.
        """
        assert self.run_id is not None
        with self._lock:
            rec.seq = self._next_seq
            launch_id = self._history.write_launch(self.run_id, rec)
            self._next_seq = rec.seq + 1  # the store may have given the next free seq instead
            self.launch_ids.append(launch_id)
            self.launches_per_kernel[rec.kernel.name] += 1
            self.errors += rec.status == "error"
            self.oob_lanes += rec.summary.oob_lanes
            self.oob_load_lanes += rec.summary.oob_load_lanes
            self.oob_store_lanes += rec.summary.oob_store_lanes
            self.dropped_lanes += rec.summary.dropped_lanes
        if self.on_launch is not None:
            self.on_launch(rec, launch_id)
        return launch_id

    def write_autotune_event(self, event: AutotuneEvent, launch_id: int | None) -> None:
        assert self.run_id is not None
        with self._lock:
            self._history.write_autotune_event(self.run_id, event, launch_id)
            self.autotune_events += 1


def record(
    db: str | None = None,
    blobs: str | Path | None = None,
    *,
    tag: str | None = None,
    autotune: AutotunePolicy = "first",
    on_oob: OobPolicy | None = None,
) -> Recording:
    """Record every Triton launch made inside the block.

    Every launch of every Triton kernel (``@triton.jit``, ``@triton.autotune``, ``@triton.heuristics``, in
    any order, decorated before or inside the block, in compiled mode or with ``TRITON_INTERPRET=1``) runs
    through Triton's CPU interpreter and is written to the history at ``db``/``blobs`` (default
    ``./.tilelens``). ``autotune="all"`` also records every pruned config's trial launch.

    Out-of-bounds lanes never crash the program: stores and atomics outside every argument's memory are
    dropped, the rest is recorded (see ``tilelens.core.bounds``). ``on_oob="raise"`` makes a launch with
    out-of-bounds lanes raise :class:`tilelens.OutOfBoundsError` once it is recorded; the default,
    ``"record"``, records it and goes on.
    """
    return Recording(db, blobs, tag=tag, autotune=autotune, on_oob=on_oob)
