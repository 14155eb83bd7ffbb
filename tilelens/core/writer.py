"""Persisting launches on a background thread, in order, while the program goes on.

Most of a write (Parquet encoding, hashing, file writes, fsync, SQLite commits) releases the GIL, so on a
machine with two cores it overlaps with the next interpreted launch instead of adding to it. The queue is
bounded (a slow disk applies back-pressure instead of piling snapshots up in memory), a single thread keeps
writes in launch order, and ``close`` drains everything: a recording that ends, normally or by an exception in
the program, has written every launch it made. A write that fails is raised in the program's thread at the
next launch or at the end of the recording, never silently dropped.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class Pending:
    """The id a queued write will get; read it once the writer has run (in-order, so later jobs can)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: Any = None


_STOP = object()


class BackgroundWriter:
    def __init__(self, depth: int = 8) -> None:
        self._jobs: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="tilelens-writer", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        self.raise_failure()
        self._jobs.put(job)

    def raise_failure(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"TileLens could not write to the history: {error}") from error

    def flush(self) -> None:
        """Block until everything queued so far is written."""
        self._jobs.join()
        self.raise_failure()

    def close(self) -> None:
        """Write everything queued, stop the thread, and raise the first failure if there was one."""
        self._jobs.put(_STOP)
        self._thread.join()
        self.raise_failure()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is _STOP:
                    return
                if self._error is None:  # after a failure, later writes would reference what is missing
                    job()
            except BaseException as exc:  # handed to the program's thread
                self._error = exc
            finally:
                self._jobs.task_done()
