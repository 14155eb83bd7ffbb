"""One interpreted launch on the batched engine: the attempt, and the transparent fallback.

Triton's ``GridExecutor.__call__`` copies the arguments to the host, runs the pre-run hooks, patches ``tl`` and
then calls the kernel once per program. :class:`BatchedEntry` stands in for the kernel function there (the
patch module puts it in place): its first call, for program (0, 0, 0), runs the kernel once for the whole grid
with batched values; when that succeeds, the calls for the other programs do nothing. When it gives up
(``Fallback``, or any error, which the per-program run then raises as the stock interpreter would), every
byte it wrote is put back (:class:`~tilelens.core.engine.writelog.WriteLog`), the collector forgets what it saw, and
this call and every later one run their program as the stock loop does. ``outcome`` says which happened and
why, for the launch's record. ``TILELENS_BATCH_DEBUG=1`` prints the traceback of an attempt that gave up
(to stderr; for developing the engine, never needed to use it).

Executed lines (``ctx.lines``, under ``record --coverage``) are captured around each call of the kernel
function: an attempt that succeeded ran every program's path at once (programs that disagree at a branch or a
loop's trip count make it give up), and one that gave up leaves no lines behind.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from tilelens.core.engine.access import BATCH_PROGRAM
from tilelens.core.engine.batched import depend
from tilelens.core.engine.batched.state import BatchState, Fallback, engine_mode, state_for
from tilelens.core.engine.writelog import WriteLog

# Installs the batched attempt's patches for the block (tilelens.core.patches.batched_patches).
Installer = Callable[[BatchState, WriteLog], "contextlib.AbstractContextManager[None]"]


def reason_of(exc: BaseException) -> str:
    """The fallback reason behind ``exc`` (the interpreter wraps helpers' exceptions in its own)."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 20:
        if isinstance(cur, Fallback):
            return cur.reason
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return f"error in the batched run: {type(exc).__name__}"


def ineligible(ctx: Any, fn: Any) -> str | None:
    """Why a launch runs per program from the start, or None when it may try the batched engine."""
    if engine_mode() == "program":
        return "TILELENS_ENGINE=program"
    if ctx.gluon is not None:
        return "gluon"
    if ctx.collector.spans.storage is None:
        return "argument storage unknown"
    code = getattr(fn, "__code__", None)
    if code is not None and "print" in code.co_names:
        return "print"
    return None


class BatchedEntry:
    """The kernel function as ``GridExecutor`` calls it, once per program (see the module docstring)."""

    def __init__(self, fn: Any, ctx: Any, builder: Any, install: Installer) -> None:
        self.fn = fn
        self.ctx = ctx
        self.builder = builder
        self.install = install
        self.outcome: dict[str, Any] = {"mode": "program"}
        self._mode: str | None = None
        # What GridExecutor reads of the function it was given (signature, globals for _patch_lang, ...).
        self.__signature__ = inspect.signature(fn)
        self.__globals__ = fn.__globals__
        self.__code__ = fn.__code__
        self.__annotations__ = getattr(fn, "__annotations__", {})
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__module__ = str(getattr(fn, "__module__", ""))
        self.__defaults__ = getattr(fn, "__defaults__", None)
        self.__kwdefaults__ = getattr(fn, "__kwdefaults__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._mode is None:
            self._mode = self._attempt(args, kwargs)
        if self._mode == "batched":
            return None
        lines = self.ctx.lines
        if lines is None:
            return self.fn(*args, **kwargs)
        with lines.watching(self.__code__):  # one program's lines (record --coverage)
            return self.fn(*args, **kwargs)

    def _attempt(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        why = ineligible(self.ctx, self.fn)
        grid = tuple(int(g) for g in self.builder.grid_dim)
        if why is None and grid[0] * grid[1] * grid[2] < 2:
            why = "one program"
        if why is not None:
            self.outcome = {"mode": "program", "fallback": why}
            return "program"
        state = state_for((grid[0], grid[1], grid[2]))
        writes = self.ctx.writes if self.ctx.writes is not None else WriteLog()
        collector = self.ctx.collector
        collector.begin_batch(state.programs)
        lines = self.ctx.lines
        watch = lines.watching(self.__code__) if lines is not None else contextlib.nullcontext()
        try:
            with self.install(state, writes), watch:
                self.fn(*args, **kwargs)
                if depend.conflict(collector.batched):
                    raise Fallback("cross-program memory dependence")
        except Exception as exc:  # noqa: BLE001 - every failure of the attempt means: run it per program
            if os.environ.get("TILELENS_BATCH_DEBUG"):
                traceback.print_exc()
            state.active = False
            writes.rollback()
            collector.reset()
            if lines is not None:  # the programs rerun one by one and show their own lines
                lines.discard()
            self.outcome = {"mode": "program", "fallback": reason_of(exc)}
            return "program"
        state.active = False
        self.outcome = {"mode": "batched"}
        return "batched"


class BatchedReads:
    """A replay's recorded out-of-bounds reads (``bounds.RecordedReads``) fed to a batched load or atomic.

    The access hooks ask with the builder's ``grid_idx``, which says "every program" during a batched run, and
    the collector's next event number; a batched access is the collector's next batched entry, the same event
    number in every program. Each program's lanes get that program's recorded bytes.
    """

    def __init__(self, reads: Any, programs: list[tuple[int, int, int]], collector: Any) -> None:
        self.reads = reads
        self.programs = programs
        self.collector = collector

    def apply(self, program: Any, event: int, data: Any) -> Any:
        if program is not BATCH_PROGRAM:
            return self.reads.apply(program, event, data)
        event = len(self.collector.batched)
        rows = [self.reads.apply(p, event, data[b]) for b, p in enumerate(self.programs)]
        if all(r is data[b] for b, r in enumerate(rows)):
            return data
        return np.stack(rows)


def periodic_check(state: BatchState, collector: Any) -> Callable[[], None]:
    """The dependence check at control-flow decisions, each time the batched accesses have doubled.

    A program may wait in a loop for another program's write (which the stock order would have made before
    it); the batched run would wait forever. Checking when the accesses so far double costs at most about
    twice the final check.
    """
    threshold = [64]

    def decide() -> None:
        n = len(collector.batched)
        if n >= threshold[0]:
            threshold[0] = 2 * n
            if depend.conflict(collector.batched):
                raise Fallback("cross-program memory dependence")

    return decide
