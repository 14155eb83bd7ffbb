"""``warp_specialize``: the partitions of one program, run one at a time in a fixed, deterministic order.

On the GPU the default partition and the worker partitions run concurrently and talk through mbarriers (a
loader fills a ring of shared buffers while the consumer computes). Run one after another, any pipeline
deeper than its ring would wait forever, so each partition runs in a thread of its own, but only one thread
ever runs: the default partition starts; a partition hands over only when it waits on an mbarrier phase that
has not completed, or when it returns; the next partition to run is the first one after it, in partition
order, that can make progress. The interleaving, and with it the order of events in the access trace, is the
same in every run, which is what bit-for-bit replay needs.

When every unfinished partition waits (some may have returned), the kernel has deadlocked: one waiting
partition raises ``BarrierError`` naming its wait (the kernel line is in its traceback), and the others are
unwound by an internal exception that never reaches the kernel's caller. Every thread has ended before
``warp_specialize`` returns or raises, also when the launching thread is interrupted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilelens.core.engine.gluon.barriers import BarrierError


class _Unwind(BaseException):
    """Ends a partition thread whose launch failed elsewhere (never seen outside this module)."""


@dataclass
class _Partition:
    index: int
    fn: Callable[[], Any]
    num_warps: int
    waiting: Callable[[], bool] | None = None  # the condition it waits for, while it waits
    done: bool = False
    result: Any = None
    error: BaseException | None = None


@dataclass
class Scheduler:
    """Runs partitions cooperatively; ``thread_init`` prepares each partition thread (the launch context)."""

    thread_init: Callable[[], None]
    partitions: list[_Partition] = field(default_factory=list)
    current: _Partition | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _running: int = -1  # index of the partition allowed to run
    _aborted: bool = False
    _blamed: int | None = None  # a partition left waiting when the others ended: it reports the deadlock

    def run(self, bodies: list[tuple[Callable[[], Any], int]]) -> Any:
        """Run ``bodies`` (callable, num_warps) as partitions, the first being the default; its result."""
        self.partitions = [_Partition(i, fn, warps) for i, (fn, warps) in enumerate(bodies)]
        threads = [
            threading.Thread(
                target=self._thread, args=(p,), name=f"tilelens-gluon-partition-{p.index}", daemon=True
            )
            for p in self.partitions
        ]
        with self._cond:
            self._running = 0
        for t in threads:
            t.start()
        try:
            with self._cond:
                while not all(p.done for p in self.partitions):
                    self._cond.wait()
        except BaseException:  # interrupted (Ctrl-C): unwind the partitions before the launch's patches go
            with self._cond:
                self._aborted = True
                self._cond.notify_all()
            for t in threads:
                t.join()
            raise
        for t in threads:
            t.join()
        errors = [
            p.error for p in self.partitions if p.error is not None and not isinstance(p.error, _Unwind)
        ]
        if errors:
            raise errors[0]
        return self.partitions[0].result

    # -- inside partition threads ------------------------------------------------------------------------

    def _thread(self, p: _Partition) -> None:
        try:
            self.thread_init()
            with self._cond:
                while self._running != p.index and not self._aborted:
                    self._cond.wait()
                if self._aborted:
                    raise _Unwind()
            self.current = p
            p.result = p.fn()
        except BaseException as exc:  # handed to the launching thread, which re-raises it
            p.error = exc
        finally:
            with self._cond:
                p.done = True
                p.waiting = None
                if p.error is not None and not isinstance(p.error, _Unwind):
                    self._aborted = True
                if not self._aborted and not self._hand_over(p):
                    # The others wait for something only this finished partition could have done.
                    self._blamed = next(q.index for q in self.partitions if not q.done)
                    self._aborted = True
                self._cond.notify_all()

    def wait_until(self, ready: Callable[[], bool], what: str) -> None:
        """Called by the running partition: return once ``ready()`` holds, letting others run meanwhile."""
        if ready():
            return
        p = self.current
        assert p is not None
        with self._cond:
            p.waiting = ready
            if not self._hand_over(p):
                p.waiting = None
                self._aborted = True
                self._cond.notify_all()
                raise BarrierError(
                    f"{what} never completes: no partition of warp_specialize can go on (deadlock)"
                )
            self._cond.notify_all()
            while self._running != p.index and not self._aborted:
                self._cond.wait()
            if self._aborted:
                if self._blamed == p.index:
                    raise BarrierError(
                        f"{what} never completes: no partition of warp_specialize can go on (deadlock)"
                    )
                raise _Unwind()
            p.waiting = None
        self.current = p

    def _hand_over(self, p: _Partition) -> bool:
        """Pick the next partition after ``p`` that can run; False when some wait and none can (deadlock)."""
        n = len(self.partitions)
        for step in range(1, n + 1):
            q = self.partitions[(p.index + step) % n]
            if not q.done and (q.waiting is None or q.waiting()):
                self._running = q.index
                return True
        return all(q.done for q in self.partitions)
