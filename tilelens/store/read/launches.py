"""Launches read out of the history for replay: which ones, and each one as plain data.

Replays run for seconds to minutes; holding a database session (and, on SQLite, a read snapshot) that long
would block nothing but would pin WAL growth. Copying the handful of rows out first keeps the session short
and lets the rest of replay run without SQLAlchemy in sight.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, func, select, text

from tilelens.errors import LaunchNotFoundError
from tilelens.records import KernelIdentity
from tilelens.store.sql.cursor import CursorQuery, Opened, read
from tilelens.store.sql.database import is_sqlite
from tilelens.store.sql.models import Kernel, Launch, LaunchArg, Run
from tilelens.store.sql.names import KERNEL_NAMES_SQL, matching_ids
from tilelens.store.sql.readonly import storable_id


@dataclass(frozen=True)
class ArgSpec:
    position: int
    name: str
    kind: str
    dtype: str | None
    shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None
    storage_offset: int | None
    storage_group: int | None
    value: Any
    before_blob: str | None
    after_blob: str | None
    storage_bytes: int | None = None  # the recorded allocation's size; None in records before migration 0003
    value_type: str | None = None  # "int", "float", "bool" (":fp32"...); None before migration 0012


@dataclass(frozen=True)
class LaunchSpec:
    id: int
    run_id: int
    kernel: KernelIdentity
    grid: tuple[int, int, int]
    config: dict[str, Any]
    status: str
    error: str | None
    device: str
    trace_blob: str | None
    duration_s: float
    args: list[ArgSpec] = field(default_factory=list)
    backend: str = "interpreter"  # where the recorded launch ran (records.Backend)
    bundle_blob: str | None = None  # the kernel's bundle as recorded (migration 0015), a blob
    versions: dict[str, Any] = field(default_factory=dict)  # what its run recorded with (tilelens, triton...)

    @property
    def constexprs(self) -> dict[str, Any]:
        """Meta-parameters as launched: the config's, else the constexpr rows (older or hand-made records)."""
        recorded = self.config.get("constexprs")
        if isinstance(recorded, dict):
            return dict(recorded)
        return {a.name: a.value for a in self.args if a.kind == "constexpr"}

    @property
    def options(self) -> dict[str, Any]:
        options = self.config.get("options")
        return dict(options) if isinstance(options, dict) else {}


def _queries() -> tuple[Any, Any]:
    """The launch row (with its kernel's) and its argument rows, for one ``launch_id``."""
    L, K, A, R = Launch.__table__.c, Kernel.__table__.c, LaunchArg.__table__.c, Run.__table__.c
    launch = (
        select(
            L.id,
            L.run_id,
            L.grid_x,
            L.grid_y,
            L.grid_z,
            L.config,
            L.status,
            L.error,
            L.device,
            L.backend,
            L.trace_blob,
            L.bundle_blob,
            L.duration_s,
            L.kernel_file_sha256,
            R.versions,
            K.module,
            K.qualname,
            K.file,
            K.def_line,
            K.source,
            K.source_sha256,
            K.cache_key,
        )
        .join_from(Launch.__table__, Kernel.__table__, L.kernel_id == K.id)
        .join(Run.__table__, L.run_id == R.id)
        .where(L.id == bindparam("launch_id"))
    )
    args = (
        select(
            A.position,
            A.name,
            A.kind,
            A.dtype,
            A.shape,
            A.strides,
            A.storage_offset,
            A.storage_group,
            A.value,
            A.before_blob,
            A.after_blob,
            A.storage_bytes,
            A.value_type,
        )
        .where(A.launch_id == bindparam("launch_id"))
        .order_by(A.position)
    )
    return launch, args


_QUERIES = _queries()
_CURSOR_QUERIES: dict[Any, tuple[CursorQuery, CursorQuery]] = {}  # by SQLite dialect


def _rows(history: Opened, launch_id: int) -> tuple[Any, list[Any]]:
    """The rows: on SQLite through the driver's cursor (``tilelens.store.write.rowsql``: a Core query costs more in
    Python than its SQL), anywhere else, or should that fail, through SQLAlchemy."""
    engine = history.engine
    if is_sqlite(engine):
        queries = _CURSOR_QUERIES.get(engine.dialect)
        if queries is None:
            queries = _CURSOR_QUERIES[engine.dialect] = (
                CursorQuery(_QUERIES[0], engine.dialect),
                CursorQuery(_QUERIES[1], engine.dialect),
            )
        try:
            found, args = read(engine, [(q, {"launch_id": launch_id}) for q in queries])
            return (found[0] if found else None), args
        except sqlite3.Error:  # a locked or unreadable file: the Core path reports it as it always did
            pass
    with history.session() as s:
        row = s.execute(_QUERIES[0], {"launch_id": launch_id}).one_or_none()
        return row, list(s.execute(_QUERIES[1], {"launch_id": launch_id}).all()) if row is not None else []


def load_launch(history: Opened, launch_id: int) -> LaunchSpec:
    # Two plain queries: ORM objects with eager loading cost several times the SQL for rows read once.
    if not storable_id(launch_id):
        raise LaunchNotFoundError(f"no launch {launch_id} in history {history.label}")
    row, args = _rows(history, launch_id)
    if row is None:
        raise LaunchNotFoundError(f"no launch {launch_id} in history {history.label}")
    return LaunchSpec(
        id=row.id,
        run_id=row.run_id,
        kernel=KernelIdentity(
            row.module,
            row.qualname,
            row.file,
            row.def_line,
            row.source,
            row.source_sha256,
            row.cache_key,
            row.kernel_file_sha256,
        ),
        grid=(row.grid_x, row.grid_y, row.grid_z),
        config=dict(row.config or {}),
        status=row.status,
        error=row.error,
        device=row.device,
        backend=row.backend,
        trace_blob=row.trace_blob,
        bundle_blob=row.bundle_blob,
        versions=dict(row.versions or {}),
        duration_s=float(row.duration_s),
        args=[
            ArgSpec(
                position=a.position,
                name=a.name,
                kind=a.kind,
                dtype=a.dtype,
                shape=None if a.shape is None else tuple(int(n) for n in a.shape),
                strides=None if a.strides is None else tuple(int(n) for n in a.strides),
                storage_offset=a.storage_offset,
                storage_group=a.storage_group,
                value=a.value,
                before_blob=a.before_blob,
                after_blob=a.after_blob,
                storage_bytes=a.storage_bytes,
                value_type=a.value_type,
            )
            for a in args
        ],
    )


def select_launches(
    history: Opened, *, run_id: int | None = None, kernel: str | None = None, trials: bool = False
) -> list[int]:
    """Ids of the launches of a run and/or a kernel, oldest first; autotune trials only with ``trials``.

    ``kernel`` is matched as everywhere (:mod:`tilelens.store.sql.names`): qualname or module.qualname, ``*`` and
    ``?`` as wildcards.
    """
    query = select(Launch.id).order_by(Launch.id)
    if run_id is not None:
        if not storable_id(run_id):
            return []
        query = query.where(Launch.run_id == run_id)
    if not trials:
        query = query.where(Launch.role == "launch")
    with history.session() as s:
        if kernel is not None:
            ids = matching_ids(kernel, s.execute(text(KERNEL_NAMES_SQL)))
            if not ids:
                return []
            query = query.where(Launch.kernel_id.in_(ids))
        return list(s.scalars(query))


def newest_run(history: Opened) -> int | None:
    """The id of the newest run, None in a history without runs."""
    with history.session() as s:
        newest = s.scalar(select(func.max(Run.id)))
    return None if newest is None else int(newest)
