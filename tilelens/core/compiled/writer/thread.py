"""A background thread that writes a compiled recording's launches, so no launch waits for a commit.

Compiled launches take microseconds; a database commit takes a millisecond or more. So a compiled recording
queues each launch (with its snapshots still in flight, ``tilelens.core.compiled.snapshots``) and this thread writes
them in batches, one transaction per batch, in launch order. Autotune events are queued behind the launch they
belong to and get its id once it is written.

Nothing is lost on a normal exit or a Python exception: :meth:`BackgroundWriter.close` (the recording's
``__exit__``) drains the queue before the run is marked finished. A write that fails is kept as ``failure``
(the recording reports it) and the thread goes on with the next batch. The queue is bounded, so a program that
launches faster than the history can take it waits instead of growing memory without end.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tilelens.core.compiled.snapshots import PendingSnapshots
from tilelens.records import AutotuneEvent, LaunchRecord

MAX_BATCH = 512
QUEUE_SIZE = 8192
# After the first queued item, wait this long for more: bigger batches cost less per launch (one commit and
# two statements per batch), and a thread that wakes for every launch would compete with the program for the GIL.
BATCH_WAIT_S = 0.02
# While launches keep coming (the last one less than QUIET_S ago) the writer stays asleep, unless HIGH_WATER
# launches are waiting or a flush/close asks: every Python line it runs is GIL time a launch-bound program
# would have to wait for. It catches up when the program pauses (a synchronize, the data loader, the end).
QUIET_S = 0.005
HIGH_WATER = QUEUE_SIZE // 2


@dataclass
class LaunchHandle:
    """Stands for a queued launch; ``id`` is its row id once written (None until then, or if it failed)."""

    record: LaunchRecord | None
    pending: PendingSnapshots | None = None
    id: int | None = None
    build: Callable[[], LaunchRecord] | None = None  # makes ``record`` on the writer's thread


@dataclass
class _Event:
    event: AutotuneEvent
    launch: LaunchHandle | None


_STOP = object()


class BackgroundWriter:
    def __init__(
        self,
        write_launches: Callable[[list[LaunchRecord]], list[int]],
        write_event: Callable[[AutotuneEvent, int | None], None],
    ) -> None:
        self._write_launches = write_launches
        self._write_event = write_event
        # A deque, not a queue.Queue: ``append`` is atomic and wakes nobody, so queueing costs the launch
        # well under a microsecond; the writer polls every BATCH_WAIT_S (``_wake`` cuts that short on close).
        self._items: deque[Any] = deque()
        self._submitted = itertools.count(1)  # next() is atomic: launches may come from several threads
        self._queued = 0
        self._done = 0
        self._done_cond = threading.Condition()
        self._wake = threading.Event()
        self._urgent = False  # a flush or close is waiting: write now, however busy the program is
        self._last_put = 0.0
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.failure: BaseException | None = None
        self.failed_launches = 0
        # True while the snapshot pool's backlog is more than half full (``PinnedPool.under_pressure``): the
        # writer then writes however busy the program is, so the backlog drains instead of filling up.
        self.pressure: Callable[[], bool] | None = None

    def submit_launch(
        self,
        rec: LaunchRecord | None,
        pending: PendingSnapshots | None,
        build: Callable[[], LaunchRecord] | None = None,
    ) -> LaunchHandle:
        """Queue a launch: its record, or (the fast path) ``build`` that makes it on this writer's thread."""
        handle = LaunchHandle(rec, pending, build=build)
        self._put(handle)
        return handle

    def submit_event(self, event: AutotuneEvent, launch: LaunchHandle | None) -> None:
        self._put(_Event(event, launch))

    def flush(self) -> None:
        """Block until everything queued so far is written (or has failed)."""
        if self._thread is None:
            return
        target = self._queued
        self._urgent = True
        self._wake.set()
        with self._done_cond:
            while self._done < target and self._thread.is_alive():
                self._done_cond.wait(0.1)

    def close(self) -> None:
        if self._thread is None:
            return
        self._put(_STOP)
        self._urgent = True
        self._wake.set()
        self._thread.join()
        self._thread = None

    def _put(self, item: Any) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name="tilelens-writer", daemon=True)
                    self._thread.start()
        self._items.append(item)
        self._last_put = time.monotonic()
        self._queued = next(self._submitted)
        if len(self._items) > QUEUE_SIZE:  # bounded: a program faster than the history waits for it
            self._wake.set()
            while len(self._items) > QUEUE_SIZE // 2 and self._thread.is_alive():
                time.sleep(0.001)

    def _loop(self) -> None:
        while True:
            if not self._items:
                self._urgent = False
                self._wake.wait(BATCH_WAIT_S)
                self._wake.clear()
                continue
            busy = time.monotonic() - self._last_put < QUIET_S
            pressed = self.pressure is not None and self.pressure()
            if busy and not self._urgent and not pressed and len(self._items) < HIGH_WATER:
                self._wake.wait(QUIET_S)
                self._wake.clear()
                continue
            items: list[Any] = []
            while self._items and len(items) < MAX_BATCH:
                items.append(self._items.popleft())
            stop = any(item is _STOP for item in items)
            try:
                self._write([item for item in items if item is not _STOP])
            finally:
                with self._done_cond:
                    self._done += len(items)
                    self._done_cond.notify_all()
            if stop:
                return

    def _write(self, items: list[Any]) -> None:
        launches: list[LaunchHandle] = []
        for item in items:
            if isinstance(item, LaunchHandle):
                launches.append(item)
                continue
            self._write_batch(launches)  # an event follows the launches queued before it
            launches = []
            try:
                self._write_event(item.event, None if item.launch is None else item.launch.id)
            except Exception as exc:  # noqa: BLE001 - kept and reported by the recording
                self.failure = self.failure or exc
        self._write_batch(launches)

    def _write_batch(self, handles: list[LaunchHandle]) -> None:
        if not handles:
            return
        pendings = [h.pending for h in handles if h.pending is not None]
        try:
            self._write_handles(handles)
        finally:  # written or failed, the pinned host slices go back to the recording's pool
            for pending in pendings:
                pending.release()

    def _write_handles(self, handles: list[LaunchHandle]) -> None:
        try:
            records: list[LaunchRecord] = []
            for h in handles:
                if h.record is None:
                    assert h.build is not None
                    h.record, h.build = h.build(), None
                if h.pending is not None:
                    h.pending.finish(h.record.args)
                records.append(h.record)
            ids = self._write_launches(records)
        except Exception as exc:  # noqa: BLE001 - kept and reported by the recording
            self.failure = self.failure or exc
            self.failed_launches += len(handles)
            return
        for h, launch_id, rec in zip(handles, ids, records):
            h.id = launch_id
            h.pending = None
            for a in rec.args:  # the bytes are in the blob store now: free the host copies
                a.before = a.after = None
