"""Removing what a history no longer needs: stray temp files, unreferenced blobs, and on request whole runs.

What is removed:

* ``.tmp`` files in the blob folders (a writer killed between writing and renaming a blob), once older than
  the grace period;
* blob files no ``blobs`` row names (a writer killed between writing its blobs and committing its rows),
  once older than the grace period;
* with ``older_than`` and/or ``untagged``: finished runs (any status but ``running``; a dead recorder's run
  is ``lost`` by then, see :mod:`tilelens.store.sql.liveness`) started before the cutoff / without a tag, with
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
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, func, or_, select, update

from tilelens.errors import BlobFolderError, UsageError
from tilelens.records import utcnow
from tilelens.store.sql import database
from tilelens.store.sql.models import AutotuneEventRow, Blob, Launch, LaunchArg, Replay, Run

if TYPE_CHECKING:
    from tilelens.store.write.history import History

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
        return _before(now, gc_age(text), text)
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise GcInputError(
            f"not an age or a date: {text!r} (e.g. 30d, 12h, 2w, 2026-01-31 or 2026-01-31T12:00)"
        ) from None
    try:
        when = when.astimezone(dt.timezone.utc)  # a naive value is taken as local time, as `ls` shows times
        when.timestamp()
    except (OverflowError, ValueError, OSError):
        raise GcInputError(f"date {text!r} is out of range (no run can be older)") from None
    return when


# Ages past this are no age a history can have; their dates would not even be representable.
_MAX_AGE = dt.timedelta(days=365 * 1000)


def gc_age(text: str) -> dt.timedelta:
    """``30d``, ``12h``... as a duration: :class:`GcInputError` past a thousand years (or unreadable)."""
    match = _AGE_RE.match(text)
    if match is None:
        raise GcInputError(f"not a duration: {text!r} (e.g. 0, 30s, 10m, 1h, 2d)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not seconds <= _MAX_AGE.total_seconds():
        raise GcInputError(f"{text.strip()} is too long a time (at most {_MAX_AGE.days:,}d)")
    return dt.timedelta(seconds=seconds)


def _before(now: dt.datetime, age: dt.timedelta, text: str) -> dt.datetime:
    try:
        return now - age
    except OverflowError:
        raise GcInputError(f"{text.strip()} is too long a time") from None


def gc_duration(text: str) -> dt.timedelta:
    """``0``, ``30s``, ``10m``, ``1h``, ``2d``: for the grace period."""
    if text.strip() == "0":
        return dt.timedelta(0)
    return gc_age(text)


def collect_garbage(
    history: History,
    *,
    older_than: dt.datetime | dt.timedelta | None = None,
    untagged: bool = False,
    dry_run: bool = False,
    grace: dt.timedelta = DEFAULT_GRACE,
    now: dt.datetime | None = None,
) -> GcReport:
    """Remove stray temp files and unreferenced blobs and, with ``older_than`` (a time, or an age) and/or
    ``untagged``, the finished runs that match (all given conditions must hold), with their launches,
    arguments, autotune events, replays and then-unreferenced blobs. Safe while others record: files younger
    than ``grace`` (default one hour) are kept. ``dry_run`` reports without removing anything. See the module
    doc."""
    now = now or utcnow()
    if isinstance(older_than, dt.timedelta):
        older_than = now - older_than
    if older_than is not None and older_than.tzinfo is None:
        raise ValueError("older_than must be timezone-aware")
    if grace < dt.timedelta(0):
        raise ValueError("the grace period cannot be negative")
    root = history.blobs.root
    if root.exists() and not root.is_dir():
        raise BlobFolderError(f"cannot use blob folder {root}: it is not a folder")
    report = GcReport(dry_run=dry_run)
    cutoff = (now - grace).timestamp()
    # A dry run writes nothing, not even the repair of runs whose recorder died: it counts them as lost.
    criteria = _run_criteria(older_than, untagged, history.lost_runs() if dry_run else [])
    plan = _plan(history, criteria)
    report.run_ids = plan.run_ids
    if dry_run:
        return _dry_run(history, plan, report, cutoff, grace)
    _delete_runs(history, plan, report)
    with _write_transaction(history) as conn:
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
        doomed = plan.candidates - _named_by_recent_launches(conn, plan.started - grace, set())
        for chunk in _chunks(sorted(doomed)):
            report.blob_rows += conn.execute(delete(Blob).where(Blob.sha256.in_(chunk))).rowcount

    # Files after the rows, outside any transaction. A row committed meanwhile names a file that some writer
    # has just written or refreshed, which the grace period keeps.
    def known(shard: str) -> set[str]:
        with history.engine.connect() as c:
            return _known(c, shard)

    _sweep_files(history.blobs.root, known, report, cutoff, dry_run=False)
    return report


def _dry_run(history: History, plan: _Plan, report: GcReport, cutoff: float, grace: dt.timedelta) -> GcReport:
    """What :func:`collect_garbage` would remove, counted through reads alone: no transaction that could
    write, no file touched (a read-only history on read-only media can be asked)."""
    label = str(history.location.sqlite_path or history.location.display_url())
    with database.translate_errors(label), history.engine.connect() as conn:

        def count(table: Any, *where: Any) -> int:
            return int(conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one())

        for runs in _chunks(plan.run_ids):
            launches = select(Launch.id).where(Launch.run_id.in_(runs))
            report.replays += count(Replay, Replay.launch_id.in_(launches))
            report.launch_args += count(LaunchArg, LaunchArg.launch_id.in_(launches))
            report.launches += count(Launch, Launch.run_id.in_(runs))
            report.autotune_events += count(AutotuneEventRow, AutotuneEventRow.run_id.in_(runs))
            report.runs += count(Run, Run.id.in_(runs))
        # The doomed runs' own launches are still there (nothing was deleted) and do not count.
        doomed = plan.candidates - _named_by_recent_launches(conn, plan.started - grace, set(plan.run_ids))
        for chunk in _chunks(sorted(doomed)):
            report.blob_rows += count(Blob, Blob.sha256.in_(chunk))
        conn.rollback()

    def known(shard: str) -> set[str]:
        with history.engine.connect() as c:
            return _known(c, shard) - doomed  # as if the doomed rows were gone

    _sweep_files(history.blobs.root, known, report, cutoff, dry_run=True)
    return report


@dataclass
class _Plan:
    """What one gc will remove, read from one snapshot of the history without taking the write lock."""

    run_ids: list[int]
    candidates: set[str]  # blob rows nothing outside the doomed runs references
    started: dt.datetime  # before the snapshot was taken


def _run_criteria(older_than: dt.datetime | None, untagged: bool, lost: list[int]) -> list[Any] | None:
    """Which runs go; ``lost``: runs still stored ``running`` whose recorder is gone (a dry run's view)."""
    if older_than is None and not untagged:
        return None
    where: list[Any] = [or_(Run.status != "running", Run.id.in_(lost)) if lost else Run.status != "running"]
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
        bundles_kept = select(Launch.bundle_blob).where(Launch.bundle_blob.is_not(None))
        args_kept = [
            select(LaunchArg.before_blob).where(LaunchArg.before_blob.is_not(None)),
            select(LaunchArg.after_blob).where(LaunchArg.after_blob.is_not(None)),
        ]
        if criteria is not None:
            doomed_runs = select(Run.id).where(*criteria)
            run_ids = [int(r[0]) for r in conn.execute(doomed_runs.order_by(Run.id))]
            doomed_launches = select(Launch.id).where(Launch.run_id.in_(doomed_runs))
            launches_kept = launches_kept.where(Launch.run_id.not_in(doomed_runs))
            bundles_kept = bundles_kept.where(Launch.run_id.not_in(doomed_runs))
            args_kept = [q.where(LaunchArg.launch_id.not_in(doomed_launches)) for q in args_kept]
        # NOT IN over non-null columns: one pass over each column, whatever the number of blobs.
        unreferenced = select(Blob.sha256).where(
            *(Blob.sha256.not_in(q) for q in (launches_kept, bundles_kept, *args_kept))
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
    rows = conn.execute(
        select(Launch.id, Launch.run_id, Launch.trace_blob, Launch.bundle_blob).where(
            Launch.created_at >= since
        )
    )
    launch_ids: list[int] = []
    shas: set[str | None] = set()
    for launch_id, run_id, trace, bundle in rows:
        if run_id not in ignored_runs:
            launch_ids.append(launch_id)
            shas.update((trace, bundle))
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
def _signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait while a transaction is open (begin to commit): Ctrl-C during gc's commit
    acts after it, between two transactions, where stopping leaves the history whole (a later gc finishes).

    Only signals left to python's defaults are held (a handler of the caller's stays the caller's); each is
    recorded by a stand-in handler and acted on, as its default would have, when the block ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    if hasattr(signal, "SIGHUP"):
        defaults[signal.SIGHUP] = signal.SIG_DFL
    came: list[int] = []
    saved = {}
    for sig, default in defaults.items():
        if signal.getsignal(sig) is default:
            saved[sig] = signal.signal(sig, lambda signum, _frame: came.append(signum))
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)
    if came:
        if came[0] == signal.SIGINT:
            raise KeyboardInterrupt
        os.kill(os.getpid(), came[0])  # its default action, now restored


@contextlib.contextmanager
def _write_transaction(history: History) -> Iterator[Connection]:
    """One short write transaction.

    On SQLite foreign keys are off inside it (set before BEGIN, restored after): deleting a ``blobs`` row
    would otherwise make SQLite scan ``launches`` and ``launch_args`` once per row (their blob columns have
    no index). Nothing is lost by it: children are deleted explicitly, before their parents, and a blob row
    is deleted only when no row names it (:func:`_plan`, :func:`_named_by_recent_launches`).
    """
    engine = history.engine
    label = str(history.location.sqlite_path or history.location.display_url())
    with _signals_held(), database.translate_errors(label), engine.connect() as conn:
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
            trans.commit()
        finally:
            if sqlite:
                raw.execute("PRAGMA foreign_keys = ON")


def _chunks(ids: list[Any], size: int = _CHUNK) -> Iterator[list[Any]]:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]


def _delete_runs(history: History, plan: _Plan, report: GcReport) -> None:
    """The planned runs' rows, children first, a few thousand launches per transaction.

    Short transactions keep concurrent writers from waiting long. A gc killed halfway leaves some of a run's
    launches; the same gc run again removes the rest.
    """
    for runs in _chunks(plan.run_ids):
        after = 0
        while True:
            with _write_transaction(history) as conn:
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
        with _write_transaction(history) as conn:
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
