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

Safe while others record. Rows are deleted in one write transaction, so a writer's rows are either all
visible to it or not yet there; what needs care is a blob file whose rows are not committed yet:

* A writer's new blob is a fresh file (or ``.tmp``) younger than the grace period: never touched.
* A writer that reuses an existing blob file sets its mtime to now first (``BlobStore``), then commits. gc
  removes a file only if it is older than the grace period, and does so by renaming it aside, re-reading its
  mtime, and deleting it only if no writer refreshed it in between (a refresh after the rename finds no file,
  and the writer writes the blob again). So a file a writer counts on is never deleted, as long as the
  writer commits within the grace period of reusing it (default one hour; launches take milliseconds to
  seconds).

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

from sqlalchemy import Connection, delete, or_, select, update

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


class GcInputError(ValueError):
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


def parse_cutoff(text: str, now: dt.datetime | None = None) -> dt.datetime:
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


def parse_duration(text: str) -> dt.timedelta:
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
    with _write_transaction(history, dry_run) as conn:
        if older_than is not None or untagged:
            _delete_runs(conn, report, older_than, untagged)
        _delete_unreferenced_blob_rows(conn, report)
        if dry_run:  # what the files would look like after these deletes, before they are rolled back
            _sweep_files(history.blobs.root, lambda shard: _known(conn, shard), report, cutoff, dry_run)
    if not dry_run:
        # After the commit, without the write lock. A row committed meanwhile names a file some writer has
        # just written or refreshed, which the grace period keeps.
        def known(shard: str) -> set[str]:
            with history.engine.connect() as c:
                return _known(c, shard)

        _sweep_files(history.blobs.root, known, report, cutoff, dry_run)
    return report


def _known(conn: Connection, shard: str) -> set[str]:
    """The blob rows whose names start with ``shard`` (two hex digits): a range of the primary key."""
    upper = f"{int(shard, 16) + 1:02x}" if shard != "ff" else "g"
    rows = conn.execute(select(Blob.sha256).where(Blob.sha256 >= shard, Blob.sha256 < upper))
    return {r[0] for r in rows}


@contextlib.contextmanager
def _write_transaction(history: History, dry_run: bool) -> Iterator[Connection]:
    """One write transaction; rolled back for a dry run.

    On SQLite foreign keys are off inside it (set before BEGIN, restored after): deleting a ``blobs`` row
    would otherwise make SQLite scan ``launches`` and ``launch_args`` once per row (their blob columns have
    no index). Nothing is lost by it: children are deleted explicitly, before their parents, and a blob row
    is deleted only when, inside this same transaction, no row names it.
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


def _chunks(ids: list[int]) -> Iterator[list[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


def _delete_runs(conn: Connection, report: GcReport, older_than: dt.datetime | None, untagged: bool) -> None:
    where = [Run.status != "running"]
    if older_than is not None:
        where.append(Run.started_at < older_than)
    if untagged:
        where.append(or_(Run.tag.is_(None), Run.tag == ""))
    run_ids = [int(r[0]) for r in conn.execute(select(Run.id).where(*where).order_by(Run.id))]
    report.run_ids = run_ids
    for runs in _chunks(run_ids):
        launches = select(Launch.id).where(Launch.run_id.in_(runs)).scalar_subquery()
        report.replays += conn.execute(delete(Replay).where(Replay.launch_id.in_(launches))).rowcount
        report.launch_args += conn.execute(
            delete(LaunchArg).where(LaunchArg.launch_id.in_(launches))
        ).rowcount
        report.autotune_events += conn.execute(
            delete(AutotuneEventRow).where(AutotuneEventRow.run_id.in_(runs))
        ).rowcount
        # ON DELETE SET NULL, by hand (keys are off): another run's event naming one of these launches.
        conn.execute(
            update(AutotuneEventRow).where(AutotuneEventRow.launch_id.in_(launches)).values(launch_id=None)
        )
        report.launches += conn.execute(delete(Launch).where(Launch.run_id.in_(runs))).rowcount
        report.runs += conn.execute(delete(Run).where(Run.id.in_(runs))).rowcount


def _delete_unreferenced_blob_rows(conn: Connection, report: GcReport) -> None:
    # NOT IN over non-null columns: one pass over each referencing column, whatever the number of blobs.
    referenced = [
        select(Launch.trace_blob).where(Launch.trace_blob.is_not(None)),
        select(LaunchArg.before_blob).where(LaunchArg.before_blob.is_not(None)),
        select(LaunchArg.after_blob).where(LaunchArg.after_blob.is_not(None)),
    ]
    unreferenced = select(Blob.sha256).where(*(Blob.sha256.not_in(q) for q in referenced))
    shas = [r[0] for r in conn.execute(unreferenced)]
    for chunk in _chunks(shas):  # type: ignore[arg-type]
        report.blob_rows += conn.execute(delete(Blob).where(Blob.sha256.in_(chunk))).rowcount


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
