"""The one object the recorder, the CLI and replay use to read and write a history.

Write order is what keeps a history consistent under crashes and concurrent writers: a call first writes every
blob it needs (each atomically, each fsync'd), then all of its rows in one short transaction. If the process
dies before the commit, the blobs stay behind unreferenced and no row exists; after the commit, every blob a
row names is on disk. No row ever points at nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, Engine, Table, func, insert, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from tilelens.config import Location, resolve_location
from tilelens.errors import (
    HistoryError,
    LaunchNotFoundError,
    NoHistoryError,
    NotAHistoryError,
    RunNotFoundError,
    SchemaBehindError,
    UsageError,
)
from tilelens.records import (
    FINISHED_RUN_STATUSES,
    REPLAY_OUTCOMES,
    AutotuneEvent,
    LaunchRecord,
    ReplayOutcome,
    RunInfo,
    RunStatus,
    utcnow,
)
from tilelens.store.files.blobs import BlobRef, BlobStore
from tilelens.store.files.jsonvalues import to_json
from tilelens.store.files.oobsample import oob_sample
from tilelens.store.files.traces import TRACE_WRITE_OPTIONS
from tilelens.store.files.tracestore import TraceStore
from tilelens.store.sql import database, journal, liveness
from tilelens.store.sql.models import TABLES, AutotuneEventRow, Blob, Launch, LaunchArg, Replay, Run
from tilelens.store.write import rows
from tilelens.store.write.rowsql import LaunchWriter


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
        self.traces = TraceStore(blobs)
        self.kernel_ids = rows.KernelIds()
        self.bundles = rows.Bundles()
        self.migrated_from: tuple[str, ...] = ()
        # SQLite writes a launch's rows through the driver's cursor (``rowsql``); PostgreSQL through Core.
        self.cursor_writer: LaunchWriter | None = None
        if database.is_sqlite(engine):
            tables = (Blob.__table__, Launch.__table__, LaunchArg.__table__, Replay.__table__)
            self.cursor_writer = LaunchWriter(engine, *cast("tuple[Table, Table, Table, Table]", tables))

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
            if path.exists():
                journal.recover_hot_journal(path, label)  # a writer killed mid-transaction: roll it back
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
            if not read_only:
                journal.recover_hot_journal(path, label)
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

    def lost_runs(self, among: Iterable[int] | None = None) -> list[int]:
        """The ``running`` runs of this host whose recording process is gone (what :meth:`repair_lost_runs`
        marks ``lost``), found without writing anything."""
        here = liveness.current_process()
        with self.session() as s:
            rows = s.execute(
                select(Run.id, Run.pid, Run.pid_start, Run.boot_id, Run.pid_ns).where(
                    Run.status == liveness.RUNNING,
                    Run.host == here.host,
                    *([] if among is None else [Run.id.in_(list(among))]),
                )
            ).all()
        return [
            r.id
            for r in rows
            if liveness.effective_status(
                liveness.RUNNING, here.host, r.pid, r.pid_start, r.boot_id, r.pid_ns, here
            )
            == liveness.LOST
        ]

    def repair_lost_runs(self, among: Iterable[int] | None = None) -> list[int]:
        """Mark ``lost`` every ``running`` run of this host whose recording process is gone; return their ids.

        ``among``: only these runs (a recording closing the runs of its process tree, ``store/tree.py``).

        Cheap enough for every open: one indexed query for the runs still ``running`` on this host, a read of
        ``/proc/<pid>/stat`` for each, and a write only when one of them is gone. Best effort: a history that
        cannot be written here (read-only file) is left as it is, and the read commands still show ``lost``.
        """
        try:
            gone = self.lost_runs(among)
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
        refs, launch, args = self.launch_rows(run_id, rec)
        kernel_id = self.kernel_ids.get(rec.kernel)
        writer = self.cursor_writer
        if writer is not None and kernel_id is not None:  # SQLite, kernel row known: the driver's cursor
            launch["kernel_id"] = kernel_id
            written = writer.attempt(writer.write, rows.blob_rows(refs.values()), launch, args)
            if written is not None:  # None: a refused row (a taken seq, say), decided below as it always was
                return written
        for attempt in range(2):
            try:
                with database.write_session(self.engine) as s:
                    database.hold_blob_rows(s)  # first: gc then waits for this transaction (see there)
                    rows.register_blobs(s, refs.values())
                    launch["kernel_id"] = self.kernel_ids.id_in(s, rec.kernel)
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
        self.kernel_ids.learn(rec.kernel, launch["kernel_id"])
        rec.seq = launch["seq"]
        return launch_id

    def write_launches(self, run_id: int, recs: list[LaunchRecord]) -> list[int]:
        """Write several launches in one transaction (blobs first); their ids, in order.

        For a background writer that drains many small launches at once: one commit instead of one per launch.
        Should the batch collide with a taken seq (a forked child), each launch is written on its own instead,
        which resolves the seq as :meth:`write_launch` does. All or nothing per transaction, as there.
        """
        if len(recs) == 1:
            return [self.write_launch(run_id, recs[0])]
        prepared = [self.launch_rows(run_id, rec) for rec in recs]
        try:
            with database.write_session(self.engine) as s:
                refs: dict[str, BlobRef] = {}
                for batch_refs, _launch, _args in prepared:
                    refs.update(batch_refs)
                database.hold_blob_rows(s)  # first: gc then waits for this transaction (store.admin.gc)
                rows.register_blobs(s, refs.values())
                in_batch: dict[rows.KernelKey, int] = {}  # a kernel new to this batch: inserted once
                for rec, (_refs, launch, _args) in zip(recs, prepared):
                    key = rows.KernelIds.key(rec.kernel)
                    kernel_id = in_batch.get(key)
                    if kernel_id is None:
                        kernel_id = in_batch[key] = self.kernel_ids.id_in(s, rec.kernel)
                    launch["kernel_id"] = kernel_id
                # Two statements for the whole batch (many-row INSERTs; ids back in parameter order), not two
                # per launch: statement overhead is most of a small launch's write.
                table = cast(Table, Launch.__table__)
                returning = insert(table).returning(table.c.id, sort_by_parameter_order=True)
                ids = [
                    int(i) for i in s.execute(returning, [launch for _r, launch, _a in prepared]).scalars()
                ]
                arg_rows = [
                    {**a, "launch_id": launch_id}
                    for launch_id, (_r, _l, args) in zip(ids, prepared)
                    for a in args
                ]
                if arg_rows:
                    s.execute(insert(cast(Table, LaunchArg.__table__)), arg_rows)
        except sa_exc.IntegrityError as exc:
            if not database.violates_unique(exc, "launches", ("run_id", "seq")):
                raise
            return [self.write_launch(run_id, rec) for rec in recs]
        for rec, (_refs, launch, _args) in zip(recs, prepared):
            self.kernel_ids.learn(rec.kernel, launch["kernel_id"])
        return ids

    def launch_rows(self, run_id: int, rec: LaunchRecord) -> rows.Rows:
        """A launch's blobs (stored now, durable together when this returns) and its rows (``rows``)."""
        return rows.launch_rows(self.blobs, self.traces, run_id, rec, self.bundles)

    def attach_trace(self, launch_id: int, rec: LaunchRecord) -> None:
        """Store ``rec``'s access trace and access counts on launch ``launch_id`` as a derived trace.

        For launches recorded compiled (no trace): ``tilelens trace`` interprets the before-snapshot and keeps
        what the interpreter saw here, marked ``trace_derived``. Blob first, then one transaction.
        """
        if rec.trace is None:
            raise UsageError(f"launch {launch_id}: no access trace to attach")
        ref = self.blobs.store_table(rec.trace, "trace", **TRACE_WRITE_OPTIONS)
        s_ = rec.summary
        per_arg = getattr(rec, "per_arg", None) or {}
        values = {
            **s_.as_columns(),
            "unattributed": rows.summary(per_arg.get(-1)),
            "trace_blob": ref.sha256,
            "trace_rows": ref.rows,
            "trace_bytes": ref.size,
            "trace_derived": True,
            "oob_sample": oob_sample(rec.trace) if s_.oob_lanes else None,
        }
        from tilelens.store.files.lanes import distinct_elements  # pyarrow and numpy: only when derived

        distinct = distinct_elements(rec.trace)  # what `show` reads instead of decoding the trace
        with database.write_session(self.engine) as s:
            database.hold_blob_rows(s)  # first: gc then waits for this transaction (store.admin.gc)
            rows.register_blobs(s, [ref])
            result = s.execute(update(Launch).where(Launch.id == launch_id).values(**values))
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise LaunchNotFoundError(f"no launch {launch_id} in history {self.label}")
            for position, access in per_arg.items():
                if position >= 0:
                    s.execute(
                        update(LaunchArg)
                        .where(LaunchArg.launch_id == launch_id, LaunchArg.position == position)
                        .values(access=rows.summary(access), distinct_elements=distinct.get(position, 0))
                    )

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
            row.kernel_id = self.kernel_ids.id_in(s, ev.kernel)
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
        versions: dict[str, Any] | None = None,
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
        writer = self.cursor_writer
        written = None if writer is None else writer.attempt(writer.write_replay, row)
        if written is not None:  # None: a refused row (an unknown launch), refused below as it always was
            return written
        with database.write_session(self.engine) as s:
            result = cast(CursorResult[Any], s.execute(insert(cast(Table, Replay.__table__)), row))
            return int(result.inserted_primary_key[0])  # type: ignore[index]  # a one-row INSERT has its key


def _finite_or_none(value: float | None) -> float | None:
    # SQLite silently stores NaN as NULL; make that explicit so every backend agrees.
    if value is None or value != value:
        return None
    return float(value)
