"""SQLAlchemy models of a history: what was run, which kernels, every launch and its arguments.

The schema is created and changed only by the Alembic migrations in ``migrations/versions``; these models are
what the code reads and writes through, and a test keeps the two in agreement. Columns the CLI filters or sorts
by are indexed; the words that status, role, kind and outcome columns hold are the vocabulary of
:mod:`tilelens.records`. Large payloads never live in rows: rows hold the sha256 of a blob, and the foreign
key to ``blobs`` makes "every referenced blob is known" a database guarantee.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# Deterministic constraint names: SQLite batch migrations and PostgreSQL both need names to alter constraints.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SHA256 = String(64)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Timestamps go in as UTC and come out timezone-aware on every backend.

    SQLite has no timezone type and returns naive values; without this, comparing a stored time with
    ``datetime.now(timezone.utc)`` would raise on SQLite and work on PostgreSQL.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: TileLens stores timezone-aware times only")
        return value.astimezone(dt.timezone.utc)

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        dt.datetime: UTCDateTime(),
        # none_as_null: Python None is SQL NULL (so "IS NULL" finds it), not the JSON text 'null'.
        dict[str, Any]: JSON(none_as_null=True),
        list[Any]: JSON(none_as_null=True),
        Any: JSON(none_as_null=True),
    }


class Blob(Base):
    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(SHA256, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)  # tensor | trace | ...
    size: Mapped[int] = mapped_column(BigInteger)  # bytes on disk
    rows: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime]


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # The run's identity across histories (ids are per database): ``tilelens db copy`` matches runs by it.
    # Always set by TileLens; nullable in the schema only so that SQLite adds it without copying the table.
    uuid: Mapped[str | None] = mapped_column(String(36), unique=True, index=True)
    argv: Mapped[list[Any]]
    cwd: Mapped[str] = mapped_column(Text)
    host: Mapped[str] = mapped_column(Text)
    pid: Mapped[int | None] = mapped_column(Integer)
    # With host and pid, who recorded the run (tilelens.store.sql.liveness): the process's start time in clock
    # ticks since boot, the kernel's boot id and the pid namespace. NULL where unknown (older runs, no /proc).
    pid_start: Mapped[int | None] = mapped_column(BigInteger)
    boot_id: Mapped[str | None] = mapped_column(String(64))
    pid_ns: Mapped[str | None] = mapped_column(String(64))
    # The run of the process that started this one (a forked or spawned child); None for a top-level run.
    parent_run_id: Mapped[int | None] = mapped_column(Integer, index=True)
    tag: Mapped[str | None] = mapped_column(Text, index=True)
    versions: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(16), index=True)  # records.RunStatus
    exit_code: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[dt.datetime] = mapped_column(index=True)
    finished_at: Mapped[dt.datetime | None]

    launches: Mapped[list[Launch]] = relationship(back_populates="run", viewonly=True)


class Kernel(Base):
    __tablename__ = "kernels"
    __table_args__ = (UniqueConstraint("module", "qualname", "source_sha256"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    module: Mapped[str] = mapped_column(Text)
    qualname: Mapped[str] = mapped_column(Text, index=True)
    file: Mapped[str] = mapped_column(Text)
    def_line: Mapped[int] = mapped_column(Integer)
    source_sha256: Mapped[str] = mapped_column(SHA256)
    cache_key: Mapped[str | None] = mapped_column(Text)  # first seen; launches keep their own
    source: Mapped[str] = mapped_column(Text)
    created_at: Mapped[dt.datetime]

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}"


class Launch(Base):
    __tablename__ = "launches"
    # Unique: no writer can give two launches of a run one seq (migration 0004).
    __table_args__ = (Index("uq_launches_run_id_seq", "run_id", "seq", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE")
    )  # see uq_launches_run_id_seq
    kernel_id: Mapped[int] = mapped_column(ForeignKey("kernels.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16), index=True)  # records.LaunchRole
    status: Mapped[str] = mapped_column(String(16), index=True)  # records.LaunchStatus
    error: Mapped[str | None] = mapped_column(Text)
    backend: Mapped[str] = mapped_column(String(32))  # records.Backend
    device: Mapped[str] = mapped_column(String(64))
    grid_x: Mapped[int] = mapped_column(Integer)
    grid_y: Mapped[int] = mapped_column(Integer)
    grid_z: Mapped[int] = mapped_column(Integer)
    config: Mapped[dict[str, Any]]
    tuning_key: Mapped[str | None] = mapped_column(Text)
    cache_key: Mapped[str | None] = mapped_column(Text)  # Triton's key: changes with callees too
    # sha256 of the kernel's whole file when this launch ran (per launch: one kernel row serves recordings whose
    # other code differs); replay runs the file only while it still hashes to this. Schema revision 0005.
    kernel_file_sha256: Mapped[str | None] = mapped_column(SHA256)

    # Access summary over the whole trace.
    loads: Mapped[int] = mapped_column(BigInteger)
    stores: Mapped[int] = mapped_column(BigInteger)
    atomics: Mapped[int] = mapped_column(BigInteger)
    load_lanes: Mapped[int] = mapped_column(BigInteger)
    store_lanes: Mapped[int] = mapped_column(BigInteger)
    atomic_lanes: Mapped[int] = mapped_column(BigInteger)
    bytes_loaded: Mapped[int] = mapped_column(BigInteger)
    bytes_stored: Mapped[int] = mapped_column(BigInteger)
    oob_lanes: Mapped[int] = mapped_column(BigInteger, index=True)
    # oob_lanes split by op (loads; stores and atomics) and the store/atomic lanes the recorder kept from being
    # written (outside every argument's storage); NULL for launches recorded before migration 0003.
    oob_load_lanes: Mapped[int | None] = mapped_column(BigInteger)
    oob_store_lanes: Mapped[int | None] = mapped_column(BigInteger)
    dropped_lanes: Mapped[int | None] = mapped_column(BigInteger)
    events: Mapped[int] = mapped_column(BigInteger)
    lanes: Mapped[int] = mapped_column(BigInteger)

    # Summary of memory events that hit no argument (the recorder's per_arg[-1]); None when there were none.
    unattributed: Mapped[dict[str, Any] | None]

    trace_blob: Mapped[str | None] = mapped_column(ForeignKey("blobs.sha256"))
    test_nodeid: Mapped[str | None] = mapped_column(Text, index=True)  # the pytest test it ran in
    trace_rows: Mapped[int | None] = mapped_column(BigInteger)
    trace_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # Migration 0012: the GPU's name (compiled launches on a GPU); whether trace_blob was derived afterwards
    # by interpreting the before-snapshot (``tilelens trace``) instead of recorded while the launch ran.
    gpu_name: Mapped[str | None] = mapped_column(Text)
    trace_derived: Mapped[bool | None] = mapped_column(Boolean)
    # Migration 0013: the first out-of-bounds events and their total (``store.oobsample``); None when the
    # launch had none, was not traced, or was recorded before 0013.
    oob_sample: Mapped[dict[str, Any] | None]
    # Migration 0015: the kernel's bundle (``tilelens.core.kernel.bundle``: its and its callees' sources and the
    # globals they read, a one-row Parquet blob) as recorded; None for launches recorded before 0015.
    bundle_blob: Mapped[str | None] = mapped_column(ForeignKey("blobs.sha256"))
    # Migration 0016: the kernel function's executed source lines (absolute in its file, sorted: the trace's
    # numbering), kept by interpreted launches of a coverage recording; None: not captured (tilelens coverage).
    executed_lines: Mapped[list[Any] | None]

    started_at: Mapped[dt.datetime] = mapped_column(index=True)
    duration_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(index=True)

    run: Mapped[Run] = relationship(back_populates="launches")
    kernel: Mapped[Kernel] = relationship()
    args: Mapped[list[LaunchArg]] = relationship(
        back_populates="launch", order_by="LaunchArg.position", cascade="all, delete-orphan"
    )

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.grid_x, self.grid_y, self.grid_z)


class LaunchArg(Base):
    __tablename__ = "launch_args"
    __table_args__ = (UniqueConstraint("launch_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    launch_id: Mapped[int] = mapped_column(ForeignKey("launches.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(16))  # records.ArgKind
    dtype: Mapped[str | None] = mapped_column(String(64))
    shape: Mapped[list[Any] | None]
    strides: Mapped[list[Any] | None]
    storage_offset: Mapped[int | None] = mapped_column(BigInteger)
    storage_group: Mapped[int | None] = mapped_column(Integer)
    storage_bytes: Mapped[int | None] = mapped_column(BigInteger)  # the allocation behind the view
    device: Mapped[str | None] = mapped_column(String(64))
    value: Mapped[Any | None]
    # Migration 0012: a scalar's Python type ("int", "float", "bool"; ":fp32" and such when its parameter's
    # annotation fixed a Triton type). SQLite gives the JSON 1.0 back as 1: replay needs the type.
    value_type: Mapped[str | None] = mapped_column(String(64))
    access: Mapped[dict[str, Any] | None]  # this argument's AccessSummary fields; None when not traced
    # Distinct elements its active in-bounds lanes touched (migration 0011); None when not traced, or recorded
    # before 0011 (then computed from the trace when shown).
    distinct_elements: Mapped[int | None] = mapped_column(BigInteger)
    before_blob: Mapped[str | None] = mapped_column(ForeignKey("blobs.sha256"))
    after_blob: Mapped[str | None] = mapped_column(
        ForeignKey("blobs.sha256")
    )  # == before_blob when unchanged
    # Migration 0014: the elements a sparse snapshot holds (the ones the launch touched, tilelens.store.files.sparse);
    # None for a whole-span snapshot, or none.
    snapshot_elements: Mapped[int | None] = mapped_column(BigInteger)

    launch: Mapped[Launch] = relationship(back_populates="args")

    @property
    def changed(self) -> bool:
        return self.after_blob is not None and self.after_blob != self.before_blob


class AutotuneEventRow(Base):
    __tablename__ = "autotune_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    kernel_id: Mapped[int] = mapped_column(ForeignKey("kernels.id"), index=True)
    launch_id: Mapped[int | None] = mapped_column(ForeignKey("launches.id", ondelete="SET NULL"), index=True)
    tuning_key: Mapped[str] = mapped_column(Text)
    configs: Mapped[list[Any]]
    timings: Mapped[list[Any] | None]  # None when the timings were dummies
    chosen: Mapped[dict[str, Any]]
    cache_hit: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[dt.datetime] = mapped_column(index=True)

    kernel: Mapped[Kernel] = relationship()


class Replay(Base):
    __tablename__ = "replays"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    launch_id: Mapped[int] = mapped_column(ForeignKey("launches.id", ondelete="CASCADE"), index=True)
    device: Mapped[str] = mapped_column(String(64))
    backend: Mapped[str] = mapped_column(String(32))
    outcome: Mapped[str] = mapped_column(String(16), index=True)  # records.ReplayOutcome
    max_abs_err: Mapped[float | None] = mapped_column(Float)
    max_rel_err: Mapped[float | None] = mapped_column(Float)
    trace_equal: Mapped[bool | None] = mapped_column(Boolean)
    message: Mapped[str | None] = mapped_column(Text)
    duration_s: Mapped[float | None] = mapped_column(Float)
    versions: Mapped[dict[str, Any] | None]
    created_at: Mapped[dt.datetime] = mapped_column(index=True)

    launch: Mapped[Launch] = relationship()


TABLES = ("runs", "kernels", "launches", "launch_args", "autotune_events", "blobs", "replays")
