"""The one object the recorder, the CLI and replay use to read and write a history.

Write order is what keeps a history consistent under crashes and concurrent writers: a call first writes every
blob it needs (each atomically, each fsync'd), then all of its rows in one short transaction. If the process
dies before the commit, the blobs stay behind unreferenced and no row exists; after the commit, every blob a
row names is on disk. No row ever points at nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import CursorResult, Engine, Table, func, insert, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from tilelens.config import Location, resolve_location
from tilelens.errors import (
    HistoryError,
    NoHistoryError,
    NotAHistoryError,
    RunNotFoundError,
    SchemaBehindError,
    UsageError,
)
from tilelens.records import (
    FINISHED_RUN_STATUSES,
    REPLAY_OUTCOMES,
    AccessSummary,
    AutotuneEvent,
    KernelIdentity,
    LaunchRecord,
    ReplayOutcome,
    RunInfo,
    RunStatus,
    utcnow,
)
from tilelens.store import database, liveness
from tilelens.store.blobs import BlobRef, BlobStore
from tilelens.store.jsonvalues import to_json
from tilelens.store.models import (
    TABLES,
    AutotuneEventRow,
    Blob,
    Kernel,
    Launch,
    LaunchArg,
    Replay,
    Run,
)
from tilelens.store.oobsample import oob_sample
from tilelens.store.rowsql import LaunchWriter
from tilelens.store.tracestore import TraceStore

if TYPE_CHECKING:
    from tilelens.store.gc import GcReport


@dataclass(frozen=True)
class HistoryStatus:
    """What ``tilelens db current`` reports; gathered without migrating or creating anything."""

    location: Location
    exists: bool
    revisions: tuple[str, ...]
    heads: tuple[str, ...]
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def up_to_date(self) -> bool:
        return self.exists and set(self.revisions) == set(self.heads)

    def as_dict(self) -> dict[str, Any]:
        return {
            "db": self.location.display_url(),
            "blobs": str(self.location.blobs_dir),
            "exists": self.exists,
            "revision": ", ".join(self.revisions) or None,
            "head": ", ".join(self.heads),
            "up_to_date": self.up_to_date,
            "counts": dict(self.counts),
        }


def _label(location: Location) -> str:
    path = location.sqlite_path
    return str(path) if path is not None else location.display_url()


def inspect_history(location: Location, script_location: Path | None = None) -> HistoryStatus:
    """Read-only status: never creates the database, never migrates, refuses a newer schema."""
    path = location.sqlite_path
    heads = tuple(database.script_heads(script_location))
    if path is not None:
        if not path.exists():
            return HistoryStatus(location, exists=False, revisions=(), heads=heads)
        database.check_sqlite_file(path, _label(location))
    engine = database.create_read_only_engine(location.db_url, path)
    try:
        label = _label(location)
        try:
            state = database.inspect_schema(engine, label, script_location)
        except NoHistoryError:  # a server without the database: nothing there, as a missing SQLite file
            return HistoryStatus(location, exists=False, revisions=(), heads=heads)
        if state.foreign_tables:
            raise NotAHistoryError(f"{label} is a database of another program, not a TileLens history")
        if not state.current:  # an empty database (a 0-byte file): no history yet
            return HistoryStatus(location, exists=False, revisions=(), heads=heads)
        with database.translate_errors(label):
            counts = database.row_counts(engine, TABLES)
        return HistoryStatus(location, exists=True, revisions=state.current, heads=state.heads, counts=counts)
    finally:
        engine.dispose()


class History:
    """An open history: a database engine plus the blob store beside it.

    Thread-safe for writes (each call uses its own session), and safe for many processes writing one SQLite
    file at once. Use :meth:`open`; the constructor takes already-prepared parts.
    """

    def __init__(self, location: Location, engine: Engine, blobs: BlobStore) -> None:
        self.location = location
        self.engine = engine
        self.blobs = blobs
        self._traces = TraceStore(blobs)
        self._kernel_ids: dict[tuple[str, str, str], int] = {}  # filled after commits only
        self.migrated_from: tuple[str, ...] = ()
        self._rows: LaunchWriter | None = None
        if database.is_sqlite(engine):  # PostgreSQL keeps SQLAlchemy's Core path (tilelens.store.rowsql)
            tables = (Blob.__table__, Launch.__table__, LaunchArg.__table__, Replay.__table__)
            self._rows = LaunchWriter(engine, *cast("tuple[Table, Table, Table, Table]", tables))

    @classmethod
    def open(
        cls,
        db: str | None = None,
        blobs: str | Path | None = None,
        *,
        location: Location | None = None,
        script_location: Path | None = None,
    ) -> History:
        """Open (creating if missing) and upgrade to the newest schema; refuse a schema newer than the code.

        Opening also marks ``lost`` the runs of this machine whose recording process died without finishing
        them (:meth:`repair_lost_runs`); a history with none is opened without any write.
        """
        location = location or resolve_location(db, blobs)
        location.refuse_in_memory()
        label = _label(location)
        path = location.sqlite_path
        if path is not None:
            database.check_sqlite_file(path, label)
            if path.exists():  # refuse a newer, foreign or damaged history before a writer's connection
                # switches it to WAL
                probe = database.create_read_only_engine(location.db_url, path)
                try:
                    state = database.inspect_schema(probe, label, script_location)
                finally:
                    probe.dispose()
                if state.foreign_tables:
                    raise NotAHistoryError(
                        f"{label} is a database of another program (it has tables but no TileLens schema)"
                    )
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise HistoryError(f"cannot create the folder of history {label}: {exc.strerror}") from exc
        engine = database.create_history_engine(location.db_url)
        try:
            before, _after = database.ensure_schema(engine, label, script_location)
        except BaseException:
            engine.dispose()
            raise
        history = cls(location, engine, BlobStore(location.blobs_dir))
        history.migrated_from = before.current
        history.repair_lost_runs()
        return history

    @classmethod
    def open_existing(
        cls,
        db: str | None = None,
        blobs: str | Path | None = None,
        *,
        location: Location | None = None,
        read_only: bool = False,
        script_location: Path | None = None,
    ) -> History:
        """An existing history at the current schema, for replays: nothing is created or migrated.

        The schema is checked through a read-only connection before anything could write, so a missing path
        stays missing, and an empty, foreign, older or newer database stays byte for byte as it was. With
        ``read_only`` the history keeps that connection (a replay that stores nothing then works on read-only
        media too); otherwise it is reopened for writing, after checking the file and its folder are writable.
        """
        location = location or resolve_location(db, blobs)
        label = _label(location)
        path = location.sqlite_path
        if path is not None:
            if not path.exists():
                raise NoHistoryError(f"no TileLens history at {label}")
            if path.is_dir():
                raise NotAHistoryError(f"{label} is a directory, not a TileLens history")
            database.check_sqlite_file(path, label)
        engine = database.create_read_only_engine(location.db_url, path)
        try:
            state = database.inspect_schema(engine, label, script_location)
            if state.foreign_tables:
                raise NotAHistoryError(f"{label} is a database of another program, not a TileLens history")
            if not state.current:
                raise NoHistoryError(f"no TileLens history at {label} (the database is empty)")
            if not state.up_to_date:
                raise SchemaBehindError(label, list(state.current), ", ".join(state.heads))
            if not read_only:
                engine.dispose()
                if path is not None:
                    for target in (path, path.parent):
                        if not os.access(target, os.W_OK):
                            raise HistoryError(f"cannot write history {label}: {target} is not writable")
                engine = database.create_history_engine(location.db_url)
        except BaseException:
            engine.dispose()
            raise
        history = cls(location, engine, BlobStore(location.blobs_dir))
        history.migrated_from = state.current
        return history

    # -- lifecycle -----------------------------------------------------------------------------------------

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def label(self) -> str:
        """The history's name in messages: its file for SQLite (as the read commands say), else its URL."""
        return _label(self.location)

    def __repr__(self) -> str:
        return f"History(db={self.location.display_url()!r}, blobs={str(self.location.blobs_dir)!r})"

    @contextlib.contextmanager
    def session(self, write: bool = False) -> Iterator[Session]:
        """A session for queries; with ``write=True`` one short transaction that commits on exit.

        Driver errors of a read (a locked, unreadable or vanished database) come out as ``HistoryError``.
        """
        if write:
            with database.write_session(self.engine) as session:
                yield session
        else:
            with (
                database.translate_errors(self.label),
                Session(self.engine, expire_on_commit=False) as session,
            ):
                yield session

    def revision(self) -> tuple[str, ...]:
        return database.inspect_schema(self.engine, _label(self.location)).current

    def counts(self) -> dict[str, int]:
        return database.row_counts(self.engine, TABLES)

    # -- runs whose process died --------------------------------------------------------------------------

    def repair_lost_runs(self, among: Iterable[int] | None = None) -> list[int]:
        """Mark ``lost`` every ``running`` run of this host whose recording process is gone; return their ids.

        ``among``: only these runs (a recording closing the runs of its process tree, ``store/tree.py``).

        Cheap enough for every open: one indexed query for the runs still ``running`` on this host, a read of
        ``/proc/<pid>/stat`` for each, and a write only when one of them is gone. Best effort: a history that
        cannot be written here (read-only file) is left as it is, and the read commands still show ``lost``.
        """
        here = liveness.current_process()
        try:
            with self.session() as s:
                rows = s.execute(
                    select(Run.id, Run.pid, Run.pid_start, Run.boot_id, Run.pid_ns).where(
                        Run.status == liveness.RUNNING,
                        Run.host == here.host,
                        *([] if among is None else [Run.id.in_(list(among))]),
                    )
                ).all()
            gone = [
                r.id
                for r in rows
                if liveness.effective_status(
                    liveness.RUNNING, here.host, r.pid, r.pid_start, r.boot_id, r.pid_ns, here
                )
                == liveness.LOST
            ]
            if gone:
                with database.write_session(self.engine) as s:
                    # Only rows still running: a run finished meanwhile keeps the status its process wrote.
                    s.execute(
                        update(Run)
                        .where(Run.id.in_(gone), Run.status == liveness.RUNNING)
                        .values(status=liveness.LOST)
                    )
        except sa_exc.OperationalError:
            return []
        return gone

    def gc(
        self,
        *,
        older_than: dt.datetime | dt.timedelta | None = None,
        untagged: bool = False,
        dry_run: bool = False,
        grace: dt.timedelta | None = None,
    ) -> GcReport:
        """Remove stray temp files and unreferenced blobs and, with ``older_than`` (a time, or an age) and/or
        ``untagged``, the finished runs that match (all given conditions must hold), with their launches,
        arguments, autotune events, replays and then-unreferenced blobs. Safe while others record: files
        younger than ``grace`` (default one hour) are kept. ``dry_run`` reports without removing anything.
        See :mod:`tilelens.store.gc`."""
        from tilelens.store import gc

        return gc.collect(
            self,
            older_than=older_than,
            untagged=untagged,
            dry_run=dry_run,
            grace=gc.DEFAULT_GRACE if grace is None else grace,
        )

    # -- writes --------------------------------------------------------------------------------------------

    def begin_run(self, info: RunInfo) -> int:
        me = liveness.current_process()
        run = Run(
            uuid=str(uuid.uuid4()),
            argv=[str(a) for a in info.argv],
            cwd=info.cwd,
            host=info.host,
            pid=me.pid,
            pid_start=me.start,
            boot_id=me.boot_id,
            pid_ns=me.pid_ns,
            parent_run_id=info.parent_run_id,
            tag=info.tag,
            versions=to_json(dict(info.versions)),
            status="running",
            exit_code=None,
            started_at=info.started_at,
            finished_at=None,
        )
        with database.write_session(self.engine) as s:
            s.add(run)
            s.flush()
            return run.id

    def finish_run(self, run_id: int, status: RunStatus, exit_code: int | None = None) -> None:
        if status not in FINISHED_RUN_STATUSES:
            raise UsageError(f"a finished run's status is one of {FINISHED_RUN_STATUSES}, not {status!r}")
        with database.write_session(self.engine) as s:
            result: CursorResult[Any] = s.execute(  # type: ignore[assignment]  # an UPDATE's Result is a CursorResult
                update(Run)
                .where(Run.id == run_id)
                .values(status=status, exit_code=exit_code, finished_at=utcnow())
            )
            if result.rowcount != 1:
                raise RunNotFoundError(f"no run {run_id} in history {_label(self.location)}")

    def write_launch(self, run_id: int, rec: LaunchRecord) -> int:
        """Write one launch (blobs first, then its rows in one transaction); returns its id.

        ``rec.seq`` is kept unless the run already has a launch with that seq (a forked child counting from
        its parent's number, say): then the launch gets the run's next free seq (one past its largest), and
        ``rec.seq`` is set to what was stored. The unique index on (run_id, seq) is what detects it.
        """
        refs, launch, args = self._launch_rows(run_id, rec)
        kernel_id = self._kernel_ids.get((rec.kernel.module, rec.kernel.qualname, rec.kernel.source_sha256))
        if self._rows is not None and kernel_id is not None:  # SQLite, kernel row known: the driver's cursor
            launch["kernel_id"] = kernel_id
            written = self._rows.attempt(self._rows.write, self._blob_rows(refs.values()), launch, args)
            if written is not None:  # None: a refused row (a taken seq, say), decided below as it always was
                return written
        for attempt in range(2):
            try:
                with database.write_session(self.engine) as s:
                    database.hold_blob_rows(s)  # first: gc then waits for this transaction (see there)
                    self._register_blobs(s, refs.values())
                    launch["kernel_id"] = self._kernel_id(s, rec.kernel)
                    if attempt:  # the seq was taken: the next free one, under this transaction's write lock
                        last = s.execute(select(func.max(Launch.seq)).where(Launch.run_id == run_id)).scalar()
                        launch["seq"] = 0 if last is None else last + 1
                    result = cast(  # parameters: cached SQL
                        CursorResult[Any], s.execute(insert(cast(Table, Launch.__table__)), launch)
                    )
                    launch_id = int(result.inserted_primary_key[0])  # type: ignore[index]  # one row inserted
                    if args:
                        s.execute(
                            insert(cast(Table, LaunchArg.__table__)),
                            [{**a, "launch_id": launch_id} for a in args],
                        )
                break
            except sa_exc.IntegrityError as exc:
                # Asking first would cost a query per launch; a taken seq is rare (forked children).
                if attempt or not database.violates_unique(exc, "launches", ("run_id", "seq")):
                    raise
        self._kernel_ids[(rec.kernel.module, rec.kernel.qualname, rec.kernel.source_sha256)] = launch[
            "kernel_id"
        ]
        rec.seq = launch["seq"]
        return launch_id

    def write_launches(self, run_id: int, recs: list[LaunchRecord]) -> list[int]:
        """Several launches in one transaction, in order; their ids (``tilelens.store.derived.write_batch``)."""
        from tilelens.store.derived import write_batch

        return write_batch(self, run_id, recs)

    def _launch_rows(
        self, run_id: int, rec: LaunchRecord
    ) -> tuple[dict[str, BlobRef], dict[str, Any], list[dict[str, Any]]]:
        """A launch's blobs (stored now, durable together when this returns) and its rows, ready to insert."""
        with self.blobs.batch():
            return self._rows_and_blobs(run_id, rec)

    def _rows_and_blobs(
        self, run_id: int, rec: LaunchRecord
    ) -> tuple[dict[str, BlobRef], dict[str, Any], list[dict[str, Any]]]:
        refs: dict[str, BlobRef] = {}

        def keep(ref: BlobRef) -> str:
            refs.setdefault(ref.sha256, ref)
            return ref.sha256

        per_arg = getattr(rec, "per_arg", None) or {}
        trace, distinct = self._traces.store(rec.trace)  # first: a reused trace is confirmed on disk
        if trace is not None:
            keep(trace)
        # Plain rows through SQLAlchemy Core: ORM objects cost more than the SQL itself at this size, and
        # this runs once per recorded launch.
        args: list[dict[str, Any]] = []
        for a in rec.args:
            touched = getattr(a, "touched", None)
            if touched is not None:  # a sparse snapshot: the touched elements only (tilelens.core.touched)
                before, after = self._store_sparse(a, touched, keep)
                tensor = None
            else:
                before = keep(self.blobs.store_tensor(a.before)) if a.before is not None else None
                after = keep(self.blobs.store_tensor(a.after)) if a.after is not None else before
                tensor = a.before if a.before is not None else a.after
            args.append(
                {
                    "position": a.position,
                    "name": a.name,
                    "kind": a.kind,
                    "dtype": a.dtype if a.dtype is not None or tensor is None else str(tensor.dtype),
                    "shape": _ints(a.shape if a.shape is not None or tensor is None else tensor.shape),
                    "strides": _ints(
                        a.strides if a.strides is not None or tensor is None else tensor.stride()
                    ),
                    "storage_offset": a.storage_offset
                    if a.storage_offset is not None or tensor is None
                    else tensor.storage_offset(),
                    "storage_group": a.storage_group,
                    "storage_bytes": a.storage_bytes,
                    "device": a.device,
                    "value": to_json(a.value),
                    "value_type": getattr(a, "value_type", None),
                    "access": _summary(per_arg.get(a.position)),
                    "distinct_elements": (
                        distinct.get(a.position, 0)
                        if distinct is not None and a.position in per_arg
                        else None
                    ),
                    "before_blob": before,
                    "after_blob": after,
                    "snapshot_elements": None if touched is None else int(touched.numel()),
                }
            )

        s_ = rec.summary
        grid = tuple(rec.grid) + (1,) * (3 - len(rec.grid))
        launch = {
            "run_id": run_id,
            "seq": rec.seq,
            "role": rec.role,
            "status": rec.status,
            "error": rec.error,
            "backend": rec.backend,
            "device": rec.device,
            "grid_x": int(grid[0]),
            "grid_y": int(grid[1]),
            "grid_z": int(grid[2]),
            "config": to_json(dict(rec.config)),
            "tuning_key": rec.tuning_key,
            "cache_key": rec.kernel.cache_key,
            "kernel_file_sha256": rec.kernel.file_sha256,
            **s_.as_columns(),
            "unattributed": _summary(per_arg.get(-1)),
            "trace_blob": trace.sha256 if trace else None,
            "test_nodeid": rec.test_nodeid,
            "trace_rows": trace.rows if trace else None,
            "trace_bytes": trace.size if trace else None,
            "gpu_name": getattr(rec, "gpu_name", None),
            "oob_sample": oob_sample(rec.trace) if s_.oob_lanes else None,
            "started_at": rec.started_at,
            "duration_s": float(rec.duration_s),
            "created_at": utcnow(),
        }
        return refs, launch, args

    def _store_sparse(self, a: Any, touched: Any, keep: Any) -> tuple[str | None, str | None]:
        """Blobs of a sparse snapshot's before and after (after = before when the launch changed none)."""
        from tilelens.store.sparse import for_argument

        if a.before is None:
            return None, None
        before = keep(self.blobs.store_sparse(for_argument(a, touched.numpy(), a.before)))
        if a.after is None:
            return before, before
        return before, keep(self.blobs.store_sparse(for_argument(a, touched.numpy(), a.after)))

    def attach_trace(self, launch_id: int, rec: LaunchRecord) -> None:
        """Store ``rec``'s access trace and counts on launch ``launch_id``, marked derived (``store.derived``)."""
        from tilelens.store.derived import attach_trace

        attach_trace(self, launch_id, rec)

    def write_autotune_event(self, run_id: int, ev: AutotuneEvent, launch_id: int | None = None) -> int:
        row = AutotuneEventRow(
            run_id=run_id,
            launch_id=launch_id,
            tuning_key=ev.tuning_key,
            configs=to_json(list(ev.configs)),
            timings=to_json(ev.timings) if ev.timings is not None else None,
            chosen=to_json(dict(ev.chosen)),
            cache_hit=bool(ev.cache_hit),
            created_at=ev.created_at,
        )
        with database.write_session(self.engine) as s:
            row.kernel_id = self._kernel_id(s, ev.kernel)
            s.add(row)
            s.flush()
            return row.id

    def write_replay(
        self,
        launch_id: int,
        *,
        outcome: ReplayOutcome,
        device: str,
        backend: str,
        max_abs_err: float | None = None,
        max_rel_err: float | None = None,
        trace_equal: bool | None = None,
        message: str | None = None,
        duration_s: float | None = None,
        versions: dict[str, str] | None = None,
        created_at: dt.datetime | None = None,
    ) -> int:
        if outcome not in REPLAY_OUTCOMES:
            raise UsageError(f"replay outcome must be one of {REPLAY_OUTCOMES}, not {outcome!r}")
        row = {
            "launch_id": launch_id,
            "device": device,
            "backend": backend,
            "outcome": outcome,
            "max_abs_err": _finite_or_none(max_abs_err),
            "max_rel_err": _finite_or_none(max_rel_err),
            "trace_equal": trace_equal,
            "message": message,
            "duration_s": duration_s,
            "versions": to_json(versions) if versions is not None else None,
            "created_at": created_at or utcnow(),
        }
        written = None if self._rows is None else self._rows.attempt(self._rows.write_replay, row)
        if written is not None:  # None: a refused row (an unknown launch), refused below as it always was
            return written
        with database.write_session(self.engine) as s:
            result = cast(CursorResult[Any], s.execute(insert(cast(Table, Replay.__table__)), row))
            return int(result.inserted_primary_key[0])  # type: ignore[index]  # a one-row INSERT has its key

    # -- helpers -------------------------------------------------------------------------------------------

    def _register_blobs(self, s: Session, refs: Any) -> None:
        database.insert_ignore(s, cast(Table, Blob.__table__), self._blob_rows(refs), keys=("sha256",))

    @staticmethod
    def _blob_rows(refs: Iterable[BlobRef]) -> list[dict[str, Any]]:
        now = utcnow()
        return [
            {"sha256": r.sha256, "kind": r.kind, "size": r.size, "rows": r.rows, "created_at": now}
            for r in refs
        ]

    def _kernel_id(self, s: Session, k: KernelIdentity) -> int:
        # Kernel rows are never changed or deleted, so an id seen in a committed write stays right.
        known = self._kernel_ids.get((k.module, k.qualname, k.source_sha256))
        return known if known is not None else self._insert_kernel(s, k)

    def _insert_kernel(self, s: Session, k: KernelIdentity) -> int:
        row = {
            "module": k.module,
            "qualname": k.qualname,
            "file": k.file,
            "def_line": int(k.def_line),
            "source_sha256": k.source_sha256,
            "cache_key": k.cache_key,
            "source": k.source,
            "created_at": utcnow(),
        }
        keys = ("module", "qualname", "source_sha256")
        database.insert_ignore(s, cast(Table, Kernel.__table__), [row], keys=keys)
        return s.execute(
            select(Kernel.id).where(
                Kernel.module == k.module,
                Kernel.qualname == k.qualname,
                Kernel.source_sha256 == k.source_sha256,
            )
        ).scalar_one()


_SUMMARY_FIELDS = tuple(f.name for f in dataclasses.fields(AccessSummary))


def _summary(summary: AccessSummary | None) -> dict[str, int] | None:
    # The fields by name (what dataclasses.asdict gives, without its deep copy: this runs per argument).
    return None if summary is None else {k: int(getattr(summary, k)) for k in _SUMMARY_FIELDS}


def _ints(values: Any) -> list[int] | None:
    return None if values is None else [int(v) for v in values]


def _finite_or_none(value: float | None) -> float | None:
    # SQLite silently stores NaN as NULL; make that explicit so every backend agrees.
    if value is None or value != value:
        return None
    return float(value)
