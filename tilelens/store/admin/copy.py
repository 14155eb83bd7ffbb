"""Moving history: copy runs, with everything they reference, from one history into another.

A laptop's SQLite history goes into the team's PostgreSQL (or back) with :func:`copy_history`; ``tilelens db
copy SRC DST`` is its face. Invariants:

* **Idempotent.** Runs are matched across histories by ``runs.uuid`` (ids are per database). A run already in
  DST is not copied again; only what it gained since the last copy is added: launches and autotune events past
  those DST has (a run copied while it was still recording), replays DST lacks (matched by launch, time,
  device, backend and outcome), and its final status. Copying twice adds nothing.
* **Ids are DST's.** Every row gets a new id allocated by DST; run, kernel and launch references are remapped
  to those ids (a child process's ``parent_run_id`` too: to its parent's run in DST, NULL when that run was
  not copied). Kernels are shared by their unique key (module, qualname, source sha256), blob rows by sha256.
* **Blobs verified, deduplicated, first.** Each blob a copied row references is read from SRC's folder (its
  hash checked, as every read does) and written into DST's folder unless DST has it; then the run's rows go in
  one transaction. A missing or corrupt blob stops the copy before any row of its run is written, with an
  error naming the blob; runs copied before it stay copied.
* **Safe to race.** Two copies of one run into one DST (two ``tilelens db copy`` at once) queue on the run
  (:func:`_lock_run`): the second reads DST again under the lock, finds the first's rows and adds nothing.
* **SRC is only read** (opening it may upgrade its schema, as opening any history does).

Runs recorded before revision 0009 got a random uuid from that migration; a row without one (written by
another tool) is identified by a uuid derived from its host, pid, start time and argv, which is the same on
every copy.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from sqlalchemy import Table, func, insert, select, update
from sqlalchemy.orm import Session

from tilelens.config import Location
from tilelens.errors import BlobCorruptError, BlobError, RunNotFoundError, SchemaBehindError
from tilelens.store.sql import database
from tilelens.store.sql.models import AutotuneEventRow, Blob, Kernel, Launch, LaunchArg, Replay, Run
from tilelens.store.write.history import History

RUNS = cast(Table, Run.__table__)
KERNELS = cast(Table, Kernel.__table__)
LAUNCHES = cast(Table, Launch.__table__)
ARGS = cast(Table, LaunchArg.__table__)
EVENTS = cast(Table, AutotuneEventRow.__table__)
REPLAYS = cast(Table, Replay.__table__)
BLOBS = cast(Table, Blob.__table__)
CHUNK = 2_000  # rows per INSERT ... RETURNING: bounded statement size on both backends
_RUN_STATE = ("status", "exit_code", "finished_at")
_RUN_NAMESPACE = uuid.UUID("6f1c8a52-3f0e-4a7e-9d7b-2b7c1e0a5d11")


@dataclass
class CopyReport:
    """What one copy added to DST (all zero when everything was already there)."""

    runs_copied: list[tuple[int, int]] = field(default_factory=list)  # (SRC id, DST id) of new runs
    runs_updated: list[tuple[int, int]] = field(default_factory=list)  # already there, gained rows or state
    runs_unchanged: int = 0
    launches: int = 0
    launch_args: int = 0
    autotune_events: int = 0
    replays: int = 0
    kernels: int = 0
    blobs: int = 0  # rows of the blobs table
    blob_files: int = 0  # files written into DST's folder
    blob_bytes: int = 0

    @property
    def added(self) -> int:
        return self.launches + self.launch_args + self.autotune_events + self.replays + len(self.runs_copied)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_identity(row: dict[str, Any]) -> str:
    """A run's uuid, or for a row without one, a uuid derived from what identifies the recording session."""
    if row.get("uuid"):
        return str(row["uuid"])
    started = row["started_at"].isoformat() if row.get("started_at") is not None else ""
    key = f"{row.get('host')}|{row.get('pid')}|{started}|{row.get('argv')}"
    return str(uuid.uuid5(_RUN_NAMESPACE, key))


def _rows(session: Session, table: Table, *where: Any, order: Any = None) -> list[dict[str, Any]]:
    query = select(table).where(*where).order_by(order if order is not None else table.c.id)
    return [dict(r._mapping) for r in session.execute(query)]


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


def _insert_returning_ids(session: Session, table: Table, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert ``rows`` (without ids); DST's new ids in the order of ``rows``."""
    ids: list[int] = []
    stmt = insert(table).returning(table.c.id, sort_by_parameter_order=True)
    for chunk in _chunks(rows):
        ids.extend(int(r[0]) for r in session.execute(stmt, list(chunk)))
    return ids


def _without_id(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "id"}


@dataclass
class _SourceRun:
    """One SRC run and every row that belongs to it, read in one session."""

    run: dict[str, Any]
    launches: list[dict[str, Any]]
    args: list[dict[str, Any]]
    events: list[dict[str, Any]]
    replays: list[dict[str, Any]]
    kernels: dict[int, dict[str, Any]]
    blobs: dict[str, dict[str, Any]]
    parent_uuid: str | None  # the identity of the run that started this one, when there is one


def _read_source(s: Session, run: dict[str, Any]) -> _SourceRun:
    launches = _rows(s, LAUNCHES, Launch.run_id == run["id"])
    launch_ids = select(Launch.id).where(Launch.run_id == run["id"]).scalar_subquery()
    args = _rows(s, ARGS, LaunchArg.launch_id.in_(launch_ids))
    events = _rows(s, EVENTS, AutotuneEventRow.run_id == run["id"])
    replays = _rows(s, REPLAYS, Replay.launch_id.in_(launch_ids))
    kernel_ids = {r["kernel_id"] for r in launches} | {e["kernel_id"] for e in events}
    kernels = {k["id"]: k for k in _rows(s, KERNELS, Kernel.id.in_(kernel_ids))} if kernel_ids else {}
    shas = (
        {r["trace_blob"] for r in launches}
        | {r["bundle_blob"] for r in launches}
        | {a["before_blob"] for a in args}
        | {a["after_blob"] for a in args}
    )
    shas.discard(None)
    blobs = (
        {b["sha256"]: b for b in _rows(s, BLOBS, Blob.sha256.in_(shas), order=Blob.sha256)} if shas else {}
    )
    parent = run.get("parent_run_id")
    parent_row = _rows(s, RUNS, Run.id == parent) if parent is not None else []
    parent_uuid = run_identity(parent_row[0]) if parent_row else None
    return _SourceRun(run, launches, args, events, replays, kernels, blobs, parent_uuid)


def _replay_key(row: dict[str, Any], launch_index: dict[int, int]) -> tuple[Any, ...]:
    return (launch_index[row["launch_id"]], row["created_at"], row["device"], row["backend"], row["outcome"])


def copy_history(src: History, dst: History, runs: Sequence[int] | None = None) -> CopyReport:
    """Copy ``runs`` (SRC ids; all runs when None) from ``src`` into ``dst``; see the module docstring."""
    report = CopyReport()
    with src.session() as s:
        where = [Run.id.in_(list(runs))] if runs is not None else []
        selected = _rows(s, RUNS, *where)
    if runs is not None:
        missing = sorted(set(runs) - {r["id"] for r in selected})
        if missing:
            raise RunNotFoundError(f"no run {', '.join(map(str, missing))} in history {src.label}")
    for run in selected:
        with src.session() as s:
            source = _read_source(s, run)
        _copy_run(source, src, dst, report)
    return report


@dataclass
class _Delta:
    """What DST lacks of one SRC run: read once optimistically, then again under the run's lock."""

    existing: tuple[Any, ...] | None  # DST's (run id, status, exit_code, finished_at), or None
    dst_launches: list[int]
    new_launches: list[dict[str, Any]]
    new_args: list[dict[str, Any]]
    new_events: list[dict[str, Any]]
    new_replays: list[dict[str, Any]]
    state: dict[str, Any]
    state_changed: bool

    @property
    def unchanged(self) -> bool:
        return self.existing is not None and not (
            self.new_launches or self.new_events or self.new_replays or self.state_changed
        )

    @property
    def needed(self) -> set[str]:
        """The blobs the new rows name."""
        shas = {r["trace_blob"] for r in self.new_launches} | {r["bundle_blob"] for r in self.new_launches}
        shas |= {a["before_blob"] for a in self.new_args}
        shas |= {a["after_blob"] for a in self.new_args}
        shas.discard(None)
        return shas


def _delta(s: Session, source: _SourceRun, identity: str) -> _Delta:
    existing = s.execute(select(Run.id, *[RUNS.c[c] for c in _RUN_STATE]).where(Run.uuid == identity)).first()
    dst_launches: list[int] = []
    dst_events = 0
    dst_replays: list[dict[str, Any]] = []
    if existing is not None:
        dst_launches = list(
            s.scalars(select(Launch.id).where(Launch.run_id == existing[0]).order_by(Launch.id))
        )
        dst_events = len(
            list(s.scalars(select(AutotuneEventRow.id).where(AutotuneEventRow.run_id == existing[0])))
        )
        if dst_launches:
            dst_replays = _rows(s, REPLAYS, Replay.launch_id.in_(dst_launches))
    # SRC launch i is DST launch i of the same run: copies keep the order, and launches are only appended.
    new_launches = source.launches[len(dst_launches) :]
    src_index = {row["id"]: i for i, row in enumerate(source.launches)}
    dst_index = {launch_id: i for i, launch_id in enumerate(dst_launches)}
    present = {_replay_key(r, dst_index) for r in dst_replays}
    new_ids = {r["id"] for r in new_launches}
    state = {c: source.run[c] for c in _RUN_STATE}
    return _Delta(
        existing=None if existing is None else tuple(existing),
        dst_launches=dst_launches,
        new_launches=new_launches,
        new_args=[a for a in source.args if a["launch_id"] in new_ids],
        new_events=source.events[dst_events:],
        new_replays=[r for r in source.replays if _replay_key(r, src_index) not in present],
        state=state,
        state_changed=existing is not None and tuple(existing[1:]) != tuple(state.values()),
    )


def _lock_run(s: Session, identity: str) -> None:
    """Hold off any other copy of this run into DST until this transaction ends.

    SQLite: the write transaction is BEGIN IMMEDIATE, one writer at a time already. PostgreSQL: an advisory
    lock keyed by the run's uuid. Two copies of one run racing (two ``tilelens db copy`` at once) then queue,
    and the second finds the first's rows when it reads DST again under the lock: nothing twice.
    """
    if s.get_bind().dialect.name == "postgresql":
        key = int.from_bytes(uuid.UUID(identity).bytes[:8], "big", signed=True)
        s.execute(select(func.pg_advisory_xact_lock(key)))


def open_copy_source(location: Location) -> History:
    """SRC of a copy, opened read-only (nothing repaired or checkpointed; read-only media work) when its
    schema is current; an older one is upgraded first, as every writer would."""
    try:
        return History.open_existing(location=location, read_only=True)
    except SchemaBehindError:
        return History.open(location=location)


def _copy_blobs(needed: set[str], source: _SourceRun, src: History, dst: History, report: CopyReport) -> None:
    """Every blob in ``needed`` into DST's folder, read (and verified) from SRC's, unless DST has it intact.

    A file already in DST's folder is verified against its hash too (it may be truncated or corrupt, or be
    SRC's own file when both share a folder): a bad one is rewritten from a good SRC, and when SRC's is bad
    as well the copy stops, naming the blob, before any row naming it is written.
    """
    for sha in sorted(needed):
        if dst.blobs.exists(sha):
            try:
                dst.blobs.verify(sha)
                continue
            except BlobError:
                pass  # rewritten below from SRC's, or refused if SRC's is bad too
        data = src.blobs.get_bytes(sha)  # raises BlobMissingError / BlobCorruptError naming the blob
        ref = dst.blobs.store_bytes(data, source.blobs[sha]["kind"], rows=source.blobs[sha]["rows"])
        if ref.sha256 != sha:  # cannot happen after a verified read; never write a blob under a wrong name
            raise BlobCorruptError(sha, dst.blobs.path(sha), ref.sha256)
        report.blob_files += 1
        report.blob_bytes += ref.size


def _copy_run(source: _SourceRun, src: History, dst: History, report: CopyReport) -> None:
    identity = run_identity(source.run)
    with dst.session() as s:
        planned = _delta(s, source, identity)
    if planned.unchanged:
        report.runs_unchanged += 1
        return
    # Blobs first: every file the new rows name is in DST's folder, verified, before any row is written.
    _copy_blobs(planned.needed, source, src, dst, report)

    with dst.session(write=True) as s:
        _lock_run(s, identity)
        database.hold_blob_rows(s)  # a concurrent gc cannot take the blob rows this copy finds
        delta = _delta(s, source, identity)  # again: a copy racing this one may have added rows meanwhile
        if delta.unchanged:
            report.runs_unchanged += 1
            return
        _copy_blobs(delta.needed - planned.needed, source, src, dst, report)  # DST lost rows meanwhile
        needed = delta.needed
        known = set(s.scalars(select(Blob.sha256).where(Blob.sha256.in_(needed)))) if needed else set()
        fresh = [source.blobs[sha] for sha in sorted(needed - known)]
        database.insert_ignore(s, BLOBS, fresh, keys=("sha256",))  # ignore: a copy of another run may race us
        report.blobs += len(fresh)
        kernel_map = _kernel_ids(s, source, delta.new_launches, delta.new_events, report)
        if delta.existing is None:
            run_row = {**_without_id(source.run), "uuid": identity}
            if run_row.get("parent_run_id") is not None:  # a child process's run: its parent's id in DST
                run_row["parent_run_id"] = s.scalar(select(Run.id).where(Run.uuid == source.parent_uuid))
            dst_run = _insert_returning_ids(s, RUNS, [run_row])[0]
            report.runs_copied.append((source.run["id"], dst_run))
        else:
            dst_run = delta.existing[0]
            if delta.state_changed:
                s.execute(update(Run).where(Run.id == dst_run).values(**delta.state))
            report.runs_updated.append((source.run["id"], dst_run))
        launch_map = {source.launches[i]["id"]: dst_id for i, dst_id in enumerate(delta.dst_launches)}
        ids = _insert_returning_ids(
            s,
            LAUNCHES,
            [
                {**_without_id(r), "run_id": dst_run, "kernel_id": kernel_map[r["kernel_id"]]}
                for r in delta.new_launches
            ],
        )
        launch_map.update({r["id"]: dst_id for r, dst_id in zip(delta.new_launches, ids)})
        args = [{**_without_id(a), "launch_id": launch_map[a["launch_id"]]} for a in delta.new_args]
        for chunk in _chunks(args):
            s.execute(insert(ARGS), list(chunk))
        events = [
            {
                **_without_id(e),
                "run_id": dst_run,
                "kernel_id": kernel_map[e["kernel_id"]],
                "launch_id": launch_map.get(e["launch_id"]) if e["launch_id"] is not None else None,
            }
            for e in delta.new_events
        ]
        for chunk in _chunks(events):
            s.execute(insert(EVENTS), list(chunk))
        replays = [{**_without_id(r), "launch_id": launch_map[r["launch_id"]]} for r in delta.new_replays]
        for chunk in _chunks(replays):
            s.execute(insert(REPLAYS), list(chunk))
    report.launches += len(delta.new_launches)
    report.launch_args += len(delta.new_args)
    report.autotune_events += len(delta.new_events)
    report.replays += len(delta.new_replays)


def _kernel_ids(
    s: Session,
    source: _SourceRun,
    launches: list[dict[str, Any]],
    events: list[dict[str, Any]],
    report: CopyReport,
) -> dict[int, int]:
    """SRC kernel id -> DST kernel id for the kernels the new rows use, inserting those DST lacks."""
    wanted = sorted({r["kernel_id"] for r in launches} | {e["kernel_id"] for e in events})
    result: dict[int, int] = {}
    for kernel_id in wanted:
        row = source.kernels[kernel_id]
        key = (
            Kernel.module == row["module"],
            Kernel.qualname == row["qualname"],
            Kernel.source_sha256 == row["source_sha256"],
        )
        found = s.scalar(select(Kernel.id).where(*key))
        if found is None:
            database.insert_ignore(
                s, KERNELS, [_without_id(row)], keys=("module", "qualname", "source_sha256")
            )
            found = s.scalar(select(Kernel.id).where(*key))
            report.kernels += 1
        assert found is not None  # inserted above, or there already
        result[kernel_id] = int(found)
    return result
