"""A compiled recording's writer in a process of its own, so building rows and SQL never take the program's GIL.

Measured on the H200 (issue 15): a writer *thread* spends 300-550 µs of Python per launch; under the program's
GIL that is time a launch-bound program waits for, deferred or not. With ``snapshots="none"`` a launch is a
:data:`~tilelens.core.compiled.rows.RawLaunch` of plain values, so it can go to another process instead:

* the program's thread marshals ``("l", n, kernel number, raw)`` (C code, about a microsecond a launch), or
  a templated launch's ``("m", ...)`` (``compiled_templates``), and appends the bytes to a deque (atomic,
  wakes nobody): bytes, because a backlog of tuples would be walked by every garbage collection of the
  program;
* a feeder thread here sends what was queued every ``FEED_S`` as one parts frame
  (``writer_child.frame_parts``) written with ``os.writev``, so the queued bytes go to the pipe as they are
  and the GIL is released while they do;
* the child (``tilelens.core.compiled.writer.child``, a fresh ``python -m``: never a fork of a process holding CUDA)
  builds the records and writes them in batches, in launch order, into the same run.

Guarantees (docs/gpu-recording.md): rows land when the child has written them, at the latest when the
recording ends (:meth:`close` sends the end and waits for the child's report; ``flush`` likewise). The
program's outputs never depend on this process: if it dies, that is reported at the next flush or the end,
the launches it had been sent but not confirmed are counted as possibly lost, and everything after is
written by this process itself (:class:`~tilelens.core.compiled.writer.child.RawWriter`, the same code). If the
program dies, the child still writes everything it received: only launches not yet sent (at most ``FEED_S``
of them) are lost. The deque is bounded: a program faster than the child waits instead of growing memory.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import marshal
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tilelens.core.compiled.writer.child import (
    RawWriter,
    event_item,
    frame,
    frame_parts,
    kernel_item,
    read_frame,
)

_dumps = marshal.dumps
# Launches are marshalled in format 2: plain values only, no shared references, and half the time of the
# default format (which builds a table of references per call: ~1.0 µs against ~0.5 µs a launch, measured on
# a templated launch). ``marshal.loads`` reads every format.
_FORMAT = 2
_shared: subprocess.Popen[bytes] | None = None
_shared_pid = 0  # the process that started it: a forked child must start its own (pipes are not shareable)
_shared_lock = threading.Lock()


def _writer_process() -> subprocess.Popen[bytes]:
    """This program's writer process, started by its first compiled recording and kept for the next ones
    (a fresh interpreter costs ~1 s of imports before it writes anything). Ends when the program does: its
    stdin closes then. A dead one is replaced."""
    global _shared, _shared_pid
    with _shared_lock:
        if _shared is not None and _shared_pid == os.getpid() and _shared.poll() is None:
            return _shared
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        _shared = subprocess.Popen(
            [sys.executable, "-m", "tilelens.core.compiled.writer.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        _shared_pid = os.getpid()
        return _shared


def stop_writer_process(timeout: float = 30.0) -> int | None:
    """End this program's writer process (idle between recordings); its exit status, None if there was none."""
    global _shared
    with _shared_lock:
        child, _shared = _shared, None
    if child is None or _shared_pid != os.getpid():
        return None
    with contextlib.suppress(OSError):
        assert child.stdin is not None
        child.stdin.close()
    try:
        code = child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:  # pragma: no cover - a child that does not end is ended
        child.kill()
        code = child.wait()
    if child.stdout is not None:
        child.stdout.close()
    return code


def writer_cpu_seconds() -> float | None:
    """CPU seconds (user and system) this program's writer process has used so far, from ``/proc`` (Linux);
    None without a live writer process or without ``/proc``. A diagnostic: ``scripts/bench.py --compiled``
    prints it per launch beside the program's own CPU, because the writer's work, though on another core,
    slows a launch-bound program on a shared host (docs/gpu-recording.md, Trade-offs). No launch reads it."""
    child = _shared
    if child is None or _shared_pid != os.getpid() or child.poll() is not None:
        return None
    try:
        fields = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, in ticks
    except (OSError, IndexError, ValueError):
        return None


atexit.register(stop_writer_process)

FEED_S = 0.01  # how often the feeder sends what accumulated (and how much a crash of the program may lose)
QUEUE_SIZE = 65536  # queued items before the program waits for the feeder


class ProcessWriter:
    """Parent half; ``report`` receives each of the child's reports (``RawWriter.report``)."""

    def __init__(
        self,
        db_url: str,
        blobs_dir: str,
        run_id: int,
        next_seq: int,
        report: Callable[[dict[str, Any]], None],
        fallback: Callable[[int], RawWriter],
    ) -> None:
        self._report = report
        self._fallback_factory = fallback
        self._items: deque[Any] = deque()
        self._numbers = itertools.count(1)
        self._known: set[int] = set()  # kernel numbers already sent
        # Kernel and template messages sent so far: a writer that takes over from a dead child learns them.
        self._definitions: list[tuple[Any, ...]] = []
        self._wake = threading.Event()
        self._sent = threading.Condition()
        self._sent_upto = 0  # items handed to the child (or the fallback) so far
        # Items queued so far, counted by ``next``: a flush or close waits for the count its own marker got,
        # which covers every item queued before it (nothing stores the count per launch).
        self._queued = itertools.count(1)
        self._lock = threading.Lock()  # one flush or close at a time
        self._stopping = False
        self._local: RawWriter | None = None  # set once the child died: this process writes from then on
        self._unconfirmed = 0  # launches sent to the child since its last report
        self._next_seq = next_seq
        self.failure: str | None = None
        self.failed_launches = 0
        self.from_templates = 0  # launches the child wrote from their template's rows (a diagnostic)
        self._child = _writer_process()
        assert self._child.stdin is not None and self._child.stdout is not None
        self._to_child = self._child.stdin
        self._from_child = self._child.stdout
        self._to_child.write(frame([("o", db_url, blobs_dir, run_id, next_seq)]))
        self._to_child.flush()
        self._feeder = threading.Thread(target=self._feed, name="tilelens-feeder", daemon=True)
        self._feeder.start()

    @property
    def pid(self) -> int:
        return self._child.pid

    # -- the program's side: cheap, never blocks while below QUEUE_SIZE -----------------------------------

    def submit_raw(self, kernel: Any, raw: tuple[Any, ...]) -> int:
        """Queue a launch of ``kernel`` (the router's ``RoutedKernel``); returns its launch number."""
        number = kernel.number
        if number not in self._known:
            self._define(kernel_item(number, kernel.identity, kernel.params))
            self._known.add(number)
        n = next(self._numbers)
        try:
            # Marshalled here, not by the feeder: the queue then holds bytes, which the garbage collector
            # does not track. A backlog of raw tuples (the child writes slower than a launch-bound program
            # launches) made every collection of the program walk all of them.
            data = _dumps(("l", n, number, raw), _FORMAT)
        except ValueError as exc:  # a value marshal cannot take: that launch is counted failed
            self.failed_launches += 1
            if self.failure is None:
                self.failure = f"{type(exc).__name__}: {exc}"
            return n
        items = self._items  # ``_put`` inlined: this runs for every launch
        items.append(data)
        next(self._queued)
        if len(items) > QUEUE_SIZE:
            self._wait_for_feeder()
        return n

    def submit_template(self, kernel: Any, template: int, body: tuple[Any, ...]) -> None:
        """Define template ``template`` (``compiled_templates.body_of``) of ``kernel`` before its launches."""
        if kernel.number not in self._known:
            self._define(kernel_item(kernel.number, kernel.identity, kernel.params))
            self._known.add(kernel.number)
        self._define(("t", template, kernel.number, body))

    def submit_flat(
        self, template: int, started: float, duration: float, grid: tuple[int, int, int], values: list[Any]
    ) -> int:
        """Queue a templated launch (``compiled_templates.Flat``); returns its launch number."""
        n = next(self._numbers)
        items = self._items
        items.append(_dumps(("m", n, template, started, duration, grid, values), _FORMAT))
        next(self._queued)
        if len(items) > QUEUE_SIZE:
            self._wait_for_feeder()
        return n

    def _define(self, item: tuple[Any, ...]) -> None:
        self._definitions.append(item)
        self._put(item)

    def submit_event(self, event: Any, launch: int | None) -> None:
        self._put(event_item(event, launch))

    def _put(self, item: Any) -> int:
        """Queue ``item``; its count among the items queued (the feeder has sent it once it sent as many)."""
        self._items.append(item)
        count = next(self._queued)
        if len(self._items) > QUEUE_SIZE:
            self._wait_for_feeder()
        return count

    def queued(self) -> int:
        """How many items were queued so far, read without advancing the count (the repr of
        ``itertools.count``, ``count(N)``, names the next one). For diagnostics and tests: no launch reads it."""
        return int(repr(self._queued)[len("count(") : -1]) - 1

    def _wait_for_feeder(self, limit: int = QUEUE_SIZE) -> None:
        """Bounded: a program faster than the child waits here, until the queue holds at most ``limit // 2``
        items, instead of growing memory."""
        self._wake.set()
        while len(self._items) > limit // 2 and self._feeder.is_alive():
            time.sleep(0.001)

    # -- flush / close ------------------------------------------------------------------------------------

    def flush(self) -> int:
        """Block until everything queued so far is written (or counted failed); the next free seq."""
        with self._lock:
            self._exchange(("f",))
            return self._next_seq

    def set_next_seq(self, seq: int) -> None:
        """The recording wrote launches itself (after a flush): the child continues at ``seq``."""
        self._next_seq = seq
        self._put(("q", seq))

    def close(self) -> None:
        with self._lock:
            if self._stopping:
                return
            self._exchange(("x",))
            self._stopping = True
            self._wake.set()
        self._feeder.join()
        # The process stays for this program's next compiled recording (it ends with the program).

    def _exchange(self, marker: tuple[str]) -> None:
        target = self._put(marker)
        self._wake.set()
        with self._sent:
            while self._sent_upto < target and self._feeder.is_alive():
                self._sent.wait(0.1)
        if self._local is not None:  # the child died earlier: the feeder wrote everything here
            self._deliver(self._local.report())
            return
        report = self._read_report()
        if report is None:
            self._child_died()
            assert self._local is not None
            self._deliver(self._local.report())
            return
        self._deliver(report)

    def _read_report(self) -> dict[str, Any] | None:
        try:
            report: dict[str, Any] | None = read_frame(self._from_child)
            return report
        except (OSError, EOFError, ValueError, TypeError):
            return None

    def _deliver(self, report: dict[str, Any]) -> None:
        self._unconfirmed = max(0, self._unconfirmed - len(report["written"]) - report["failed"])
        self._next_seq = report["next_seq"]
        if report["failure"] and self.failure is None:
            self.failure = report["failure"]
        self.failed_launches += report["failed"]
        self.from_templates += report.get("from_templates", 0)
        self._report(report)

    def _child_died(self) -> None:
        """Reported once; launches sent but unconfirmed may be lost; from now on this process writes."""
        if self._local is not None:
            return
        code = self._child.poll()
        lost = self._unconfirmed
        self.failed_launches += lost
        if self.failure is None:
            self.failure = (
                f"the writer process (pid {self._child.pid}) ended unexpectedly (exit status {code}); "
                f"up to {lost} launch(es) it had been sent may be missing; later launches were written here"
            )
        self._unconfirmed = 0
        # Launches the child did write keep their seq: a collision makes the store pick the next free one.
        self._local = self._fallback_factory(self._next_seq + lost)
        # Kernels and templates the child had been sent: the launches after this one name them.
        self._local.handle([item for item in self._definitions])

    # -- the feeder thread --------------------------------------------------------------------------------

    def _feed(self) -> None:
        while True:
            self._wake.wait(FEED_S)
            self._wake.clear()
            queued, pop = self._items, self._items.popleft
            items = [pop() for _ in range(len(queued))]  # appended meanwhile: the next round
            if items:
                self._send(items)
                with self._sent:
                    self._sent_upto += len(items)
                    self._sent.notify_all()
            if self._stopping and not self._items:
                return

    def _send(self, items: list[Any]) -> None:
        """``items``: launches as marshalled bytes, other messages as tuples (the child reads both). An item
        marshal refuses is counted failed and left out; the rest go on, in order."""
        launches = sum(1 for item in items if type(item) is bytes)
        if self._local is None:
            parts, refused = frame_parts(items)
            for _, exc in refused:
                self.failed_launches += 1
                if self.failure is None:
                    self.failure = f"{type(exc).__name__}: {exc}"
            try:
                write_all(self._to_child.fileno(), parts)
                self._unconfirmed += launches
                return
            except (OSError, ValueError):
                self._child_died()
        assert self._local is not None
        decoded = [marshal.loads(item) if type(item) is bytes else item for item in items]
        self._local.handle([item for item in decoded if item[0] not in ("f", "x")])


def _iov_max() -> int:
    """Buffers one ``writev`` takes: the system's IOV_MAX (Linux and macOS: 1024), at most 1024."""
    try:
        return max(16, min(1024, os.sysconf("SC_IOV_MAX")))
    except (ValueError, OSError):
        return 16  # POSIX's least


_IOV_MAX = _iov_max()


def write_all(fd: int, parts: list[bytes], writev: Callable[[int, list[Any]], int] = os.writev) -> None:
    """Write ``parts`` to ``fd`` in order, all of them: ``writev`` hands the kernel the buffers as they are
    (no joined copy) and releases the GIL while it writes; a short write (a signal arrived mid-way) goes on
    where it stopped. ``writev`` is a parameter for tests."""
    pending: list[Any] = list(parts)
    while pending:
        chunk = pending[:_IOV_MAX]
        written = writev(fd, chunk)
        if written <= 0 and any(chunk):
            raise OSError(f"a write to fd {fd} took nothing")
        done = 0
        while done < len(chunk) and written >= len(chunk[done]):
            written -= len(chunk[done])
            done += 1
        del pending[:done]
        if written:
            pending[0] = memoryview(pending[0])[written:]
