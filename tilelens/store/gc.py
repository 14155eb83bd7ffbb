"""Removing what a history no longer needs: stray temp files, unreferenced blobs, and on request whole runs.

What is removed:

* ``.tmp`` files in the blob folders (a writer killed between writing and renaming a blob), once older than
  the grace period;
* blob files no ``blobs`` row names (a writer killed between writing its blobs and committing its rows),
  once older than the grace period;
* with ``older_than`` and/or ``untagged``: finished runs (any status but ``running``; a dead recorder's run
  is ``lost`` by then, see :mod:`tilelens.store.liveness`) started before the cutoff / without a tag, with
  their launches, arguments, autotune events and replays; then the ``blobs`` rows nothing references any
  more, and their files (older than the grace period). Kernel rows stay: they are small, and writers cache
  their ids.

Safe while others record, without holding them up. The plan (which runs, which blob rows nothing else
names) is read from one snapshot without the write lock: that scan reads every launch and argument row.
Then short write transactions delete the runs' rows, children first, a few thousand launches each, and a
last one deletes the planned blob rows, except those named by launches created since the snapshot (less the
grace period): a writer may have committed such a launch after the snapshot. For the files:

* A writer's new blob is a fresh file (or ``.tmp``) younger than the grace period: never touched.
* A writer that reuses an existing blob file sets its mtime to now first (``BlobStore``), then commits. gc
  removes a file only if it is older than the grace period, and does so by renaming it aside, re-reading its
  mtime, and deleting it only if no writer refreshed it in between (a refresh after the rename finds no file,
  and the writer writes the blob again).

So no committed row ever names a missing blob or blob row, as long as a writer commits within the grace
period of building its rows and writing or reusing its blobs (default one hour; a launch takes milliseconds
to seconds, and a writer gives up after 30 s waiting for the lock).

A grace period of zero is for histories nobody is writing to. The database file keeps its size: SQLite
reuses the freed pages for later rows.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, func, or_, select, update

from tilelens.errors import UsageError
from tilelens.records import utcnow
from tilelens.store import database
from tilelens.store.models import AutotuneEventRow, Blob, Launch, LaunchArg, Replay, Run

if TYPE_CHECKING:
    from tilelens.store.history import History

DEFAULT_GRACE = dt.timedelta(hours=1)
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_SHARD_RE = re.compile(r"^[0-9a-f]{2}$")
_AGE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_CHUNK = 500  # ids per IN (...): well under every backend's limit on bound parameters
_LAUNCHES_PER_TRANSACTION = 2000  # about 0.1 s of deleting (~0.2 s on a busy laptop): a writer's longest wait


class GcInputError(UsageError):
    """An age or date gc cannot read."""


@dataclass
class GcReport:
    """What :func:`collect` removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    runs: int = 0
    launches: int = 0
    launch_args: int = 0
    autotune_events: int = 0
    replays: int = 0
    blob_rows: int = 0
    blob_files: int = 0
    blob_bytes: int = 0
    tmp_files: int = 0
    tmp_bytes: int = 0
    young_files: int = 0  # unreferenced blob or temp files left for a later gc: younger than the grace period
    run_ids: list[int] = field(default_factory=list)

    @property
    def files(self) -> int:
        return self.blob_files + self.tmp_files

    @property
    def bytes_freed(self) -> int:
        return self.blob_bytes + self.tmp_bytes

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["files"] = self.files
        out["bytes_freed"] = self.bytes_freed
        return out


def gc_cutoff(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` before ``now``, or an ISO date/time (local time if naive)."""
    now = now or utcnow()
    match = _AGE_RE.match(text)
    if match is not None:
        return now - dt.timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise GcInputError(
            f"not an age or a date: {text!r} (e.g. 30d, 12h, 2w, 2026-01-31 or 2026-01-31T12:00)"
        ) from None
    return when.astimezone(dt.timezone.utc)  # a naive value is taken as local time, as `ls` shows times


def gc_duration(text: str) -> dt.timedelta:
    """``0``, ``30s``, ``10m``, ``1h``, ``2d``: for the grace period."""
    if text.strip() == "0":
        return dt.timedelta(0)
    match = _AGE_RE.match(text)
    if match is None:
        raise GcInputError(f"not a duration: {text!r} (e.g. 0, 30s, 10m, 1h, 2d)")
    return dt.timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def collect(
    history: History,
    *,
    older_than: dt.datetime | dt.timedelta | None = None,
    untagged: bool = False,
    dry_run: bool = False,
    grace: dt.timedelta = DEFAULT_GRACE,
    now: dt.datetime | None = None,
) -> GcReport:
    """Remove leftovers and, with ``older_than``/``untagged``, matching finished runs; see the module doc."""
    now = now or utcnow()
    if isinstance(older_than, dt.timedelta):
        older_than = now - older_than
    if older_than is not None and older_than.tzinfo is None:
        raise ValueError("older_than must be timezone-aware")
    if grace < dt.timedelta(0):
        raise ValueError("the grace period cannot be negative")
    report = GcReport(dry_run=dry_run)
    cutoff = (now - grace).timestamp()
    criteria = _run_criteria(older_than, untagged)
    plan = _plan(history, criteria)
    report.run_ids = plan.run_ids
    _delete_runs(history, plan, report, dry_run)
    with _write_transaction(history, dry_run) as conn:
        if conn.dialect.name == "postgresql":
            # SQLite's write lock (BEGIN IMMEDIATE) keeps writers from committing between the look below and
            # the delete; on PostgreSQL a writer could commit a launch naming a doomed blob in between (the
            # delete then fails on its foreign key), or find the blob row, then lose it to this delete (its
            # insert fails). Every writer's transaction that names blobs starts by writing to ``blobs`` (its
            # rows, ON CONFLICT DO NOTHING, or :func:`database.hold_blob_rows`), so SHARE on ``blobs``, taken
            # first, waits for those being written now and holds off the next until this one ends.
            conn.exec_driver_sql("LOCK TABLE blobs, launches, launch_args IN SHARE MODE")
        # Not the blobs that launches created since the plan's snapshot (less the grace period) name: a
        # writer may have committed them after it, or be about to.
        # A dry run deleted nothing: the doomed runs' own launches are still there, and do not count.
        ignored = set(plan.run_ids) if dry_run else set()
        doomed = plan.candidates - _named_by_recent_launches(conn, plan.started - grace, ignored)
        for chunk in _chunks(sorted(doomed)):
            if dry_run:  # the runs' rows are still there (those deletes were rolled back): a delete of
                # these would fail on PostgreSQL's foreign keys, so count what it would remove
                report.blob_rows += conn.execute(
                    select(func.count()).select_from(Blob).where(Blob.sha256.in_(chunk))
                ).scalar_one()
            else:
                report.blob_rows += conn.execute(delete(Blob).where(Blob.sha256.in_(chunk))).rowcount

    # Files after the rows, outside any transaction. A row committed meanwhile names a file that some writer
    # has just written or refreshed, which the grace period keeps.
    def known(shard: str) -> set[str]:
        with history.engine.connect() as c:
            rows = _known(c, shard)
        return rows - doomed if dry_run else rows  # a dry run deleted nothing: as if it had

    _sweep_files(history.blobs.root, known, report, cutoff, dry_run)
    return report


@dataclass
class _Plan:
    """What one gc will remove, read from one snapshot of the history without taking the write lock."""

    run_ids: list[int]
    candidates: set[str]  # blob rows nothing outside the doomed runs references
    started: dt.datetime  # before the snapshot was taken


def _run_criteria(older_than: dt.datetime | None, untagged: bool) -> list[Any] | None:
    if older_than is None and not untagged:
        return None
    where: list[Any] = [Run.status != "running"]
    if older_than is not None:
        where.append(Run.started_at < older_than)
    if untagged:
        where.append(or_(Run.tag.is_(None), Run.tag == ""))
    return where


def _plan(history: History, criteria: list[Any] | None) -> _Plan:
    """One read transaction (one snapshot): the runs to remove, and the blob rows then unreferenced.

    The reference scan reads every launch and argument row, so it runs here, where writers are not held up;
    the write transactions after it only delete, and look at the launches created since the snapshot.
    """
    started = utcnow()
    with history.engine.connect() as conn:
        run_ids: list[int] = []
        launches_kept = select(Launch.trace_blob).where(Launch.trace_blob.is_not(None))
        args_kept = [
            select(LaunchArg.before_blob).where(LaunchArg.before_blob.is_not(None)),
            select(LaunchArg.after_blob).where(LaunchArg.after_blob.is_not(None)),
        ]
        if criteria is not None:
            doomed_runs = select(Run.id).where(*criteria)
            run_ids = [int(r[0]) for r in conn.execute(doomed_runs.order_by(Run.id))]
            doomed_launches = select(Launch.id).where(Launch.run_id.in_(doomed_runs))
            launches_kept = launches_kept.where(Launch.run_id.not_in(doomed_runs))
            args_kept = [q.where(LaunchArg.launch_id.not_in(doomed_launches)) for q in args_kept]
        # NOT IN over non-null columns: one pass over each column, whatever the number of blobs.
        unreferenced = select(Blob.sha256).where(
            *(Blob.sha256.not_in(q) for q in (launches_kept, *args_kept))
        )
        candidates = {r[0] for r in conn.execute(unreferenced)}
    return _Plan(run_ids, candidates, started)


def _named_by_recent_launches(conn: Connection, since: dt.datetime, ignored_runs: set[int]) -> set[str]:
    """Blobs named by launches built at ``since`` or later (``created_at`` is indexed), but for those of
    ``ignored_runs``. (Only a dry run ignores runs: in a real one a deleted run's id may already be reused.)

    A writer sets ``created_at`` when it builds a launch's rows, before it waits for the write lock, so every
    launch committed after the plan's snapshot is among these if it was committed within the grace period of
    being built, the same promise the blob files rely on. (Not ids: SQLite reuses the largest id once the
    newest rows are deleted, as this gc may just have done.)
    """
    rows = conn.execute(select(Launch.id, Launch.run_id, Launch.trace_blob).where(Launch.created_at >= since))
    launch_ids: list[int] = []
    shas: set[str | None] = set()
    for launch_id, run_id, trace in rows:
        if run_id not in ignored_runs:
            launch_ids.append(launch_id)
            shas.add(trace)
    for chunk in _chunks(launch_ids):
        for before, after in conn.execute(
            select(LaunchArg.before_blob, LaunchArg.after_blob).where(LaunchArg.launch_id.in_(chunk))
        ):
            shas.update((before, after))
    return {sha for sha in shas if sha is not None}


def _known(conn: Connection, shard: str) -> set[str]:
    """The blob rows whose names start with ``shard`` (two hex digits): a range of the primary key."""
    upper = f"{int(shard, 16) + 1:02x}" if shard != "ff" else "g"
    rows = conn.execute(select(Blob.sha256).where(Blob.sha256 >= shard, Blob.sha256 < upper))
    return {r[0] for r in rows}


@contextlib.contextmanager
def _write_transaction(history: History, dry_run: bool) -> Iterator[Connection]:
    """One short write transaction; rolled back for a dry run.

    On SQLite foreign keys are off inside it (set before BEGIN, restored after): deleting a ``blobs`` row
    would otherwise make SQLite scan ``launches`` and ``launch_args`` once per row (their blob columns have
    no index). Nothing is lost by it: children are deleted explicitly, before their parents, and a blob row
    is deleted only when no row names it (:func:`_plan`, :func:`_named_by_recent_launches`).
    """
    engine = history.engine
    label = str(history.location.sqlite_path or history.location.display_url())
    with database.translate_errors(label), engine.connect() as conn:
        sqlite = database.is_sqlite(conn)
        raw = conn.connection.driver_connection
        assert raw is not None
        if sqlite:
            raw.execute("PRAGMA foreign_keys = OFF")
            conn.execution_options(**{database.BEGIN_OPTION: "IMMEDIATE"})
        try:
            trans = conn.begin()
            try:
                yield conn
            except BaseException:
                trans.rollback()
                raise
            if dry_run:
                trans.rollback()
            else:
                trans.commit()
        finally:
            if sqlite:
                raw.execute("PRAGMA foreign_keys = ON")


def _chunks(ids: list[Any], size: int = _CHUNK) -> Iterator[list[Any]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]


def _delete_runs(history: History, plan: _Plan, report: GcReport, dry_run: bool) -> None:
    """The planned runs' rows, children first, a few thousand launches per transaction.

    Short transactions keep concurrent writers from waiting long. A gc killed halfway leaves some of a run's
    launches; the same gc run again removes the rest.
    """
    for runs in _chunks(plan.run_ids):
        after = 0
        while True:
            with _write_transaction(history, dry_run) as conn:
                ids = list(
                    conn.execute(
                        select(Launch.id)
                        .where(Launch.run_id.in_(runs), Launch.id > after)
                        .order_by(Launch.id)
                        .limit(_LAUNCHES_PER_TRANSACTION)
                    ).scalars()
                )
                if not ids:
                    break
                after = ids[-1]
                for chunk in _chunks(ids, _LAUNCHES_PER_TRANSACTION):
                    report.replays += conn.execute(delete(Replay).where(Replay.launch_id.in_(chunk))).rowcount
                    report.launch_args += conn.execute(
                        delete(LaunchArg).where(LaunchArg.launch_id.in_(chunk))
                    ).rowcount
                    # ON DELETE SET NULL, by hand (keys are off): an event of another run naming one of these.
                    conn.execute(
                        update(AutotuneEventRow)
                        .where(AutotuneEventRow.launch_id.in_(chunk))
                        .values(launch_id=None)
                    )
                    report.launches += conn.execute(delete(Launch).where(Launch.id.in_(chunk))).rowcount
        with _write_transaction(history, dry_run) as conn:
            report.autotune_events += conn.execute(
                delete(AutotuneEventRow).where(AutotuneEventRow.run_id.in_(runs))
            ).rowcount
            report.runs += conn.execute(delete(Run).where(Run.id.in_(runs))).rowcount


def _sweep_files(
    root: Path, known_in: Callable[[str], set[str]], report: GcReport, cutoff: float, dry_run: bool
) -> None:
    """Delete old ``.tmp`` files and old blob files no row names. Folders stay (a writer may be using one)."""
    try:
        shards = sorted(p for p in root.iterdir() if _SHARD_RE.match(p.name) and p.is_dir())
    except FileNotFoundError:
        return
    for shard in shards:
        known = known_in(shard.name)
        for path in sorted(shard.iterdir()):
            name = path.name
            is_tmp = name.endswith(".tmp")
            if not is_tmp and (not _SHA_RE.match(name) or name in known):
                continue
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            if st.st_mtime >= cutoff:
                report.young_files += 1
                continue
            if not dry_run and not (_remove_tmp(path) if is_tmp else _remove_unreferenced(path, cutoff)):
                report.young_files += 0 if is_tmp else 1
                continue
            if is_tmp:
                report.tmp_files += 1
                report.tmp_bytes += st.st_size
            else:
                report.blob_files += 1
                report.blob_bytes += st.st_size


def _remove_tmp(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:  # its writer renamed it into place, or another gc took it
        return False
    return True


def _remove_unreferenced(path: Path, cutoff: float) -> bool:
    """Delete an old unreferenced blob unless a writer refreshed it meanwhile; False when it stays.

    Renamed aside first, then its mtime is read again: a writer that refreshed it before the rename is seen
    (the file goes back), and one that tries after the rename finds no file and writes the blob anew. The
    aside name ends in ``.tmp``, so a gc killed here leaves only what a later gc removes.
    """
    aside = path.with_name(f".{path.name[:16]}.gc-{os.getpid()}.tmp")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    if aside.stat().st_mtime >= cutoff:
        os.replace(aside, path)  # identical bytes if a writer has written it again meanwhile
        return False
    aside.unlink()
    return True
