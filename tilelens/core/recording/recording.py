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
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from tilelens import runner
from tilelens.core import compat, session
from tilelens.core.compiled.router import CompiledRouter
from tilelens.core.compiled.snapshots import SnapshotMode, SnapshotPolicy
from tilelens.core.compiled.writer.thread import BackgroundWriter
from tilelens.core.engine.bounds import OobPolicy, resolve_policy
from tilelens.core.interpreted.trace import TritonTrace, trace_class
from tilelens.core.patches import TuningMirror, interception_patches
from tilelens.core.recording import children
from tilelens.core.session import AutotunePolicy
from tilelens.errors import UnsupportedError, UsageError
from tilelens.records import BACKENDS, AutotuneEvent, Backend, LaunchRecord, RunInfo
from tilelens.version import versions


class Recording:
    """``with tilelens.record(...) as rec:`` — see ``tilelens.record`` for the options."""

    def __init__(
        self,
        db: str | None = None,
        blobs: str | Path | None = None,
        *,
        tag: str | None = None,
        autotune: AutotunePolicy | None = None,
        argv: list[str] | None = None,
        history: Any = None,
        on_oob: OobPolicy | None = None,
        parent_run_id: int | None = None,
        follow_children: bool = False,
        lazy_run: bool = False,
        backend: Backend | None = None,
        snapshots: SnapshotMode | None = None,
        snapshot_kernels: tuple[str, ...] = (),
        snapshot_budget: int | None = None,
        runner: Any = None,
        writer: str = "auto",
        snapshot_pool_bytes: int = 0,
        snapshot_backlog_bytes: int | None = None,
        coverage: bool = False,
    ) -> None:
        if tag is None or autotune is None or on_oob is None or backend is None or snapshots is None:
            from tilelens.config import load_settings  # the project's: TILELENS_* or [tool.tilelens]

            settings = load_settings()
            tag = settings.tag if tag is None else tag
            autotune = settings.autotune if autotune is None else autotune  # type: ignore[assignment]
            on_oob = settings.on_oob if on_oob is None else on_oob  # type: ignore[assignment]
            backend = settings.backend if backend is None else backend  # type: ignore[assignment]
            snapshots = settings.snapshots if snapshots is None else snapshots  # type: ignore[assignment]
        if autotune not in ("first", "all"):
            raise UsageError(f"autotune must be 'first' or 'all', not {autotune!r}")
        if backend not in BACKENDS:
            raise UsageError(f"backend must be 'interpreter' or 'compiled', not {backend!r}")
        self.backend: Backend = cast(Backend, backend)
        try:
            self.snapshot_policy = SnapshotPolicy(
                cast(SnapshotMode, snapshots), tuple(snapshot_kernels), snapshot_budget
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        self._writer: Any = None  # a BackgroundWriter (thread) or a ProcessWriter (core/writer_process.py)
        self._compiled: CompiledRouter | None = None
        if writer not in ("auto", "thread", "process"):
            raise UsageError(f"writer must be 'auto', 'thread' or 'process', not {writer!r}")
        # "auto": a writer process where launches are plain values (snapshots="none"), else a thread.
        self._writer_kind = writer
        self._snapshot_pool_bytes = snapshot_pool_bytes
        self._snapshot_backlog_bytes = snapshot_backlog_bytes
        if self.backend == "compiled":
            self._writer = BackgroundWriter(self._write_launches, self._write_event_now)
            self._compiled = CompiledRouter(self, self.snapshot_policy)
            if runner is not None:
                self._compiled.runner = runner
        self.autotune_policy: AutotunePolicy = autotune
        self.on_oob: OobPolicy = resolve_policy(on_oob)
        # Interpreted launches also keep the kernel function's executed lines (``tilelens coverage``).
        self.coverage = bool(coverage)
        self._db, self._blobs, self.tag = db, blobs, tag
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
        self.unsnapshotted = 0  # compiled launches written without snapshots: not replayable
        self.write_failure: str | None = None  # the background writer's first failure (compiled recordings)
        self._traced: dict[int, tuple[Any, TritonTrace]] = {}
        self._mirror = TuningMirror()
        self._lock = threading.Lock()
        self._patches: Any = None
        self._next_seq = 0
        self.on_launch: Any = None  # optional callback(record, launch_id), e.g. a live status line
        self.exit_code: int | None = None  # set by `tilelens record` to the program's exit status
        self.ended_by_signal: int | None = None  # set by `tilelens record`: SIGTERM/SIGHUP ended the program
        # Child processes (tilelens.core.recording.children): a child's run links to its parent's; a lazy run is begun
        # by the first launch, so a child that launches nothing leaves no empty run behind.
        self.parent_run_id = parent_run_id
        self.follow_children = follow_children
        self._lazy_run = lazy_run
        self._finished = False

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
        if not self._lazy_run:
            self._begin_run()
        if self._compiled is not None:
            self._start_compiled()
        session.activate(self)
        self._patches = self._interception()
        try:
            self._patches.__enter__()
        except BaseException:
            session.deactivate(self)
            raise
        children.attach(self)
        return self

    @property
    def snapshots_dropped(self) -> int:
        """Launches recorded without snapshots because the writer's backlog was full (``snapshot_backlog_bytes``)."""
        return self.snapshot_policy.dropped

    @property
    def next_seq(self) -> int:
        """The sequence number the next launch of this recording gets (a writer process starts there)."""
        return self._next_seq

    def _interception(self) -> Any:
        if self._compiled is None:
            return interception_patches(self._route)
        # A compiled recording's launches go straight to its router (one call less per launch).
        return interception_patches(self._route, mark_trials=True, direct=self._compiled.direct_routes())

    def _begin_run(self) -> None:
        argv = self._argv if self._argv else list(sys.argv)
        info = RunInfo(
            argv=argv,
            cwd=os.getcwd(),
            host=socket.gethostname(),
            versions=versions(),
            tag=self.tag,
            parent_run_id=self.parent_run_id,
        )
        self.run_id = self._history.begin_run(info)
        children.run_started(self)

    def finish(self, status: Any, exit_code: int | None = None) -> None:
        """Mark this process's run finished, once; nothing when no run was begun (a lazy one never was)."""
        if self._finished or self.run_id is None:
            return
        self._finished = True
        with runner.deferred_signals():
            self._history.finish_run(self.run_id, status, exit_code)

    def amend_finish(self, status: Any, exit_code: int | None) -> None:
        """Store the run's end again: the process ended otherwise than it looked when the run was finished
        (a signal right after, an ``os._exit`` in an atexit callback)."""
        if self.run_id is None or self._history is None:
            return
        self._finished = True
        with runner.deferred_signals():
            self._history.finish_run(self.run_id, status, exit_code)

    def become_child(self) -> None:
        """In a forked child: from now on this process's launches go to a run of its own.

        The child inherits this object, the patches and the history's engine from its parent. Its run links
        to the parent's and is begun by its first launch; the parent's run, counters and database
        connections are the parent's alone (the pooled connections are dropped here, never closed: closing
        them would close the parent's).
        """
        self._lock = threading.Lock()  # another thread of the parent may have held it at the fork
        if self.run_id is not None:
            self.parent_run_id = self.run_id
        self.run_id = None
        self._lazy_run = True
        self._finished = False
        self._next_seq = 0
        self.launch_ids = []
        self.launches_per_kernel = Counter()
        self.errors = self.oob_lanes = self.autotune_events = 0
        self.oob_load_lanes = self.oob_store_lanes = self.dropped_lanes = 0
        self.exit_code = None
        self.unsnapshotted = 0
        if (
            self._writer is not None
        ):  # the parent's writer thread did not survive the fork; its queue is its own
            self._writer = BackgroundWriter(self._write_launches, self._write_event_now)
            if self._compiled is not None:
                self._compiled.submit = None  # the parent's writer process is the parent's
                self._compiled.use_templates(None)
        self.on_launch = None  # the parent's live status line is not this process's
        self._argv = []
        self._history.engine.dispose(close=False)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._patches.__exit__(exc_type, exc, tb)
        finally:
            self._close_writer()
            children.detach(self)
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
                self._close_lost_children()
                self.finish(status, self.exit_code)
            finally:
                if self._owns_history:
                    self._history.close()

    def _close_lost_children(self) -> None:
        """The top-level recording, ending: its children's runs whose process is gone are stored ``lost``.

        A child's recording (``parent_run_id`` set, a forked child's included) leaves this to the top. Best
        effort: a history that cannot be read or written now still ends this run; the next open repairs.
        """
        if self.parent_run_id is not None or self.run_id is None or self._finished:
            return
        from tilelens.store.admin.tree import close_lost_children

        with contextlib.suppress(Exception):
            close_lost_children(self._history, self.run_id)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Launches inside this block run as they would without TileLens, and are not recorded."""
        self._patches.__exit__(None, None, None)
        session.deactivate(self)
        try:
            yield
        finally:
            session.activate(self)
            self._patches = self._interception()
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
        if self._compiled is not None and kind != "interpreted":
            return self._compiled.route(kernel, kind, args, kwargs)
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

    # -- compiled recordings: the background writer ------------------------------------------------------

    def _start_compiled(self) -> None:
        """The writer process (``snapshots="none"``, a run already begun) and the snapshot pinned pool."""
        from tilelens.core.compiled import sink as compiled_sink

        assert self._compiled is not None
        self._writer = compiled_sink.choose_writer(self, self._writer_kind) or self._writer
        # The launch's thread calls the writer process directly (one call less per launch).
        self._compiled.submit = getattr(self._writer, "submit_raw", None)
        self._compiled.use_templates(self._writer)
        pool = compiled_sink.snapshot_pool(
            self.snapshot_policy, self._snapshot_pool_bytes, self._snapshot_backlog_bytes
        )
        self._compiled.pool = pool
        if pool is not None and isinstance(self._writer, BackgroundWriter):
            self._writer.pressure = pool.under_pressure  # a full backlog wakes the writer

    def submit_raw(self, kernel: Any, raw: tuple[Any, ...]) -> Any:
        """Queue a raw compiled launch (``compiled_rows.RawLaunch``); its handle or launch number."""
        from tilelens.core.compiled import sink as compiled_sink

        return compiled_sink.submit_raw(self._writer, kernel, raw)

    def submit_launch(
        self, rec: LaunchRecord | None, pending: Any, build: Callable[[], LaunchRecord] | None = None
    ) -> Any:
        """Queue a compiled launch (or ``build``, which makes it on the writer's thread) for the background
        writer; its handle gets the row id once written. The test node id is read now, on the launch's thread."""
        assert self._writer is not None
        nodeid = session.nodeid
        if rec is not None:
            if rec.test_nodeid is None:
                rec.test_nodeid = nodeid
            return self._writer.submit_launch(rec, pending)
        assert build is not None
        make = build

        def build_here() -> LaunchRecord:
            made = make()
            if made.test_nodeid is None:
                made.test_nodeid = nodeid
            return made

        return self._writer.submit_launch(None, pending, build_here)

    def submit_event(self, event: AutotuneEvent, launch: Any) -> None:
        assert self._writer is not None
        self._writer.submit_event(event, launch)

    def flush(self) -> None:
        """Wait until every queued launch is written (compiled recordings; nothing to wait for otherwise)."""
        if self._writer is not None:
            seq = self._writer.flush()
            if seq is not None:  # the writer process numbered the launches: continue after them
                self._next_seq = seq
            self._report_writer_failure()

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._report_writer_failure()
        if self._compiled is not None:
            self._compiled.pool = None  # the pinned chunks go back to torch once the writer let go

    def _report_writer_failure(self) -> None:
        writer = self._writer
        if writer is not None and writer.failure is not None and not self.write_failure:
            failure = writer.failure
            self.write_failure = (
                failure if isinstance(failure, str) else f"{type(failure).__name__}: {failure}"
            )
            print(
                f"tilelens: {writer.failed_launches} launch(es) could not be written: {self.write_failure}",
                file=sys.stderr,
            )

    def _write_launches(self, recs: list[LaunchRecord]) -> list[int]:
        with self._lock:
            if self.run_id is None:
                self._begin_run()
            assert self.run_id is not None
            for i, rec in enumerate(recs):
                rec.seq = self._next_seq + i
            ids = list(self._history.write_launches(self.run_id, recs))
            self._next_seq = recs[-1].seq + 1
            for rec, launch_id in zip(recs, ids):
                self._count(rec, launch_id)
        if self.on_launch is not None:
            for rec, launch_id in zip(recs, ids):
                self.on_launch(rec, launch_id)
        return ids

    def _write_event_now(self, event: AutotuneEvent, launch_id: int | None) -> None:
        self._write_autotune_event(event, launch_id)

    def _count(self, rec: LaunchRecord, launch_id: int) -> None:
        self.launch_ids.append(launch_id)
        self.launches_per_kernel[rec.kernel.name] += 1
        self.errors += rec.status == "error"
        self.oob_lanes += rec.summary.oob_lanes
        self.oob_load_lanes += rec.summary.oob_load_lanes
        self.oob_store_lanes += rec.summary.oob_store_lanes
        self.dropped_lanes += rec.summary.dropped_lanes
        if rec.backend == "compiled" and any(a.kind == "tensor" and a.before is None for a in rec.args):
            self.unsnapshotted += 1

    def store_early(self, tensors: list[Any]) -> None:
        """Start storing the before-snapshots of a launch about to be interpreted (``BlobStore.store_early``):
        their new blobs become durable while the kernel runs, not after it. Best effort, never an error here:
        ``write_launch`` stores each snapshot in any case, and reports what fails then."""
        if self._writer is not None or self._history is None:
            return
        store = getattr(getattr(self._history, "blobs", None), "store_early", None)
        if store is None:
            return
        with runner.deferred_signals(), self._lock:
            for t in tensors:
                try:
                    store(t)
                except Exception:  # noqa: BLE001,S112 - the ordinary store at write_launch raises it properly
                    continue

    def write_launch(self, rec: LaunchRecord) -> int:
        """Persist one launch before its launch returns to the program.

        Synchronously, on purpose: a background writer thread was measured (scripts/bench.py) to make small
        launches slower, not faster. Its Python half (row building, SQLAlchemy) competes for the GIL with
        the interpreter, and its GIL-free half (hashing, fsync) is a few milliseconds that it could not hide.
        """
        if rec.test_nodeid is None:
            rec.test_nodeid = session.nodeid
        if self._writer is not None:  # a compiled recording's interpreted launch: after those queued before
            self.flush()
        with runner.deferred_signals(), self._lock:  # never cut half-way through a database round trip
            if self.run_id is None:
                self._begin_run()
            assert self.run_id is not None
            rec.seq = self._next_seq
            launch_id = self._history.write_launch(self.run_id, rec)
            self._next_seq = rec.seq + 1  # the store may have given the next free seq instead
            self._count(rec, launch_id)
            if hasattr(self._writer, "set_next_seq"):
                self._writer.set_next_seq(self._next_seq)
        if self.on_launch is not None:
            self.on_launch(rec, launch_id)
        return cast(int, launch_id)

    def write_autotune_event(self, event: AutotuneEvent, launch_id: int | None) -> None:
        if self._writer is not None:
            self.flush()
        self._write_autotune_event(event, launch_id)

    def _write_autotune_event(self, event: AutotuneEvent, launch_id: int | None) -> None:
        with runner.deferred_signals(), self._lock:
            if self.run_id is None:
                self._begin_run()
            assert self.run_id is not None
            self._history.write_autotune_event(self.run_id, event, launch_id)
            self.autotune_events += 1


def record(
    db: str | None = None,
    blobs: str | Path | None = None,
    *,
    tag: str | None = None,
    autotune: AutotunePolicy | None = None,
    on_oob: OobPolicy | None = None,
    backend: Backend | None = None,
    snapshots: SnapshotMode | None = None,
    snapshot_kernels: tuple[str, ...] = (),
    snapshot_budget: int | None = None,
    snapshot_pool_bytes: int = 0,
    snapshot_backlog_bytes: int | None = None,
    writer: str = "auto",
    coverage: bool = False,
) -> Recording:
    """Record every Triton launch made inside the block.

    Every launch of every Triton kernel (``@triton.jit``, ``@triton.autotune``, ``@triton.heuristics``, in
    any order, decorated before or inside the block, in compiled mode or with ``TRITON_INTERPRET=1``) runs
    through Triton's CPU interpreter and is written to the history at ``db``/``blobs`` (resolved by
    ``tilelens.config.resolve_location``: a ``.tilelens`` found upwards, else ``./.tilelens``).
    ``autotune="all"`` also records every pruned config's trial launch. ``tag`` and ``autotune`` not given
    come from ``TILELENS_TAG``/``TILELENS_AUTOTUNE`` or ``[tool.tilelens]`` (default: no tag, ``"first"``).

    Out-of-bounds lanes never crash the program: stores and atomics outside every argument's memory are
    dropped, the rest is recorded (see ``tilelens.core.engine.bounds``). ``on_oob="raise"`` makes a launch with
    out-of-bounds lanes raise :class:`tilelens.OutOfBoundsError` once it is recorded; the default,
    ``"record"``, records it and goes on.

    ``backend="compiled"`` (or ``[tool.tilelens] backend``) runs kernels compiled on their device instead, as
    they run without TileLens (Triton's own autotuning, real timings), and records everything but the access
    trace (``tilelens trace`` derives it later from the before-snapshot); rows are written in the background
    (with ``snapshots="none"`` by a writer process, else a thread) and land at the latest when the block ends.
    ``snapshots`` ("all", "first": each kernel version's first launch per argument shapes, "none"),
    ``snapshot_kernels`` (name patterns) and ``snapshot_budget`` (bytes) choose which launches keep tensor
    snapshots; a launch without them is recorded but cannot be replayed. ``snapshot_pool_bytes`` pins that much
    host memory for snapshots when the block starts (else the pool grows, doubling, as launches need it).
    ``snapshot_backlog_bytes`` (default 2 GiB) bounds the pinned memory snapshots waiting for the writer may
    hold: past it a launch is recorded without snapshots (counted in ``snapshots_dropped``) instead of the
    program waiting for the writer.
    ``writer="thread"`` writes ``snapshots="none"`` launches from a thread of this process instead of the
    writer process (``tilelens.core.compiled.writer.process``).
    ``coverage=True`` also keeps, for each interpreted launch, the lines of the kernel function that ran
    (``tilelens coverage``; see docs/coverage.md for what it costs).
    """
    return Recording(
        db,
        blobs,
        tag=tag,
        autotune=autotune,
        on_oob=on_oob,
        backend=backend,
        snapshots=snapshots,
        snapshot_kernels=snapshot_kernels,
        snapshot_budget=snapshot_budget,
        snapshot_pool_bytes=snapshot_pool_bytes,
        snapshot_backlog_bytes=snapshot_backlog_bytes,
        writer=writer,
        coverage=coverage,
    )
