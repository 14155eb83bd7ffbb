"""The on-disk layout of ``tilelens export --dataset DIR``: a Hive-partitioned Parquet dataset, no SQL here.

::

    DIR/launches/kernel=K/day=YYYY-MM-DD/part-0.parquet       one row per launch        (LAUNCH_SCHEMA)
    DIR/arguments/kernel=K/day=YYYY-MM-DD/part-0.parquet      one row per argument      (ARGUMENT_SCHEMA)
    DIR/trace_lanes/kernel=K/day=YYYY-MM-DD/part-0.parquet    one row per traced lane   (lanes.LANE_SCHEMA)

``kernel`` is the kernel's ``module.qualname`` and ``day`` the UTC date the launch started; both live in the
folder names only (Spark refuses a column that is both in the files and in the path). A name's ASCII
punctuation is escaped as ``%XX`` (``f.<locals>.k`` is ``kernel=f.%3Clocals%3E.k``), which pyarrow, DuckDB,
Polars and Spark decode back to the exact name (:func:`escape_segment`).

Invariants: every file of a table has exactly that table's schema (types fixed here, never inferred from the
values); a partition with no rows of a table has no file in it; the folder appears whole or not at all
(:func:`staged_folder`), and an existing non-empty folder is replaced only when asked.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import string
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from tilelens.errors import UsageError
from tilelens.store.files.lanes import LANE_SCHEMA

#: One row per launch: what ``launch_overview`` offers to group by, plus the kernel's module and qualname.
LAUNCH_SCHEMA = pa.schema(
    [
        pa.field("launch_id", pa.int64()),
        pa.field("run_id", pa.int64()),
        pa.field("seq", pa.int64()),
        pa.field("started_at", pa.timestamp("us", tz="UTC")),
        pa.field("duration_s", pa.float64()),
        pa.field("kernel_id", pa.int64()),
        pa.field("module", pa.string()),
        pa.field("qualname", pa.string()),
        pa.field("source_sha256", pa.string()),
        pa.field("cache_key", pa.string()),
        pa.field("grid_x", pa.int64()),
        pa.field("grid_y", pa.int64()),
        pa.field("grid_z", pa.int64()),
        pa.field("role", pa.string()),
        pa.field("status", pa.string()),
        pa.field("error", pa.string()),
        pa.field("backend", pa.string()),
        pa.field("device", pa.string()),
        pa.field("gpu_name", pa.string()),
        pa.field("config", pa.string()),  # JSON text, as stored
        pa.field("tuning_key", pa.string()),
        pa.field("loads", pa.int64()),
        pa.field("stores", pa.int64()),
        pa.field("atomics", pa.int64()),
        pa.field("events", pa.int64()),
        pa.field("lanes", pa.int64()),
        pa.field("active_lanes", pa.int64()),
        pa.field("load_lanes", pa.int64()),
        pa.field("store_lanes", pa.int64()),
        pa.field("atomic_lanes", pa.int64()),
        pa.field("bytes_loaded", pa.int64()),
        pa.field("bytes_stored", pa.int64()),
        pa.field("oob_lanes", pa.int64()),
        pa.field("oob_load_lanes", pa.int64()),
        pa.field("oob_store_lanes", pa.int64()),
        pa.field("dropped_lanes", pa.int64()),
        pa.field("trace_blob", pa.string()),
        pa.field("trace_rows", pa.int64()),
        pa.field("trace_derived", pa.bool_()),
        pa.field("test_nodeid", pa.string()),
        pa.field("tag", pa.string()),
    ]
)

#: One row per kernel parameter of a launch (``launch_args``); JSON columns as their stored text.
ARGUMENT_SCHEMA = pa.schema(
    [
        pa.field("launch_id", pa.int64()),
        pa.field("position", pa.int32()),
        pa.field("name", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("dtype", pa.string()),
        pa.field("shape", pa.list_(pa.int64())),
        pa.field("strides", pa.list_(pa.int64())),
        pa.field("storage_offset", pa.int64()),
        pa.field("storage_group", pa.int64()),
        pa.field("storage_bytes", pa.int64()),
        pa.field("device", pa.string()),
        pa.field("value", pa.string()),
        pa.field("value_type", pa.string()),
        pa.field("access", pa.string()),
        pa.field("distinct_elements", pa.int64()),
        pa.field("snapshot_elements", pa.int64()),
        pa.field("before_blob", pa.string()),
        pa.field("after_blob", pa.string()),
        pa.field("written", pa.bool_()),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "launches": LAUNCH_SCHEMA,
    "arguments": ARGUMENT_SCHEMA,
    "trace_lanes": LANE_SCHEMA,
}
PARTITION_KEYS = ("kernel", "day")
NAME_MAX = 255  # bytes in one folder name, on Linux's and macOS's file systems
FILE_NAME = "part-0.parquet"
ROW_GROUP_ROWS = 1 << 18  # rows buffered per row group: few large groups read fast, and bound the memory


# Characters a folder name keeps as they are: URI's unreserved ones, and every non-ASCII character.
_KEPT = frozenset(string.ascii_letters + string.digits + "-_.~")


def escape_segment(value: str) -> str:
    """``value`` as a Hive partition value: every ASCII character but ``A-Za-z0-9-_.~`` as ``%XX``.

    pyarrow, DuckDB and Polars decode ``%XX`` as UTF-8, Spark as one character per escape: an escaped
    non-ASCII character would come back garbled in Spark, so non-ASCII characters stay as they are, and
    every reader gives back exactly ``value``. ``/``, ``=``, ``%`` and control characters are always escaped.
    """
    return "".join(c if c in _KEPT or ord(c) > 0x7F else f"%{ord(c):02X}" for c in value)


def kernel_value(kernel: str) -> str:
    """The kernel's partition value as written: its escaped name, or, when ``kernel=`` and that would not fit
    in one folder name (NAME_MAX bytes), as much of it as fits, ``~`` and 16 hex digits of the name's sha256.
    Readers then see that shortened name; ``launches.module`` and ``qualname`` keep the whole one."""
    escaped = escape_segment(kernel)
    if len(f"kernel={escaped}".encode()) <= NAME_MAX:
        return escaped
    room = NAME_MAX - len("kernel=~") - 16
    kept: list[str] = []
    for c in kernel:
        piece = escape_segment(c)
        room -= len(piece.encode())
        if room < 0:
            break
        kept.append(piece)
    return "".join(kept) + "~" + hashlib.sha256(kernel.encode()).hexdigest()[:16]


def partition_path(kernel: str, day: str) -> str:
    """``kernel=K/day=D``: the values escaped by :func:`escape_segment` (a long kernel name shortened by
    :func:`kernel_value`)."""
    return f"kernel={kernel_value(kernel)}/day={escape_segment(day)}"


class PartitionedTable:
    """One table of the dataset, written one partition after another: one file per partition, whole row groups.

    Memory stays bounded by one row group: batches are buffered until ``ROW_GROUP_ROWS`` rows, then written.
    """

    def __init__(self, root: Path, name: str) -> None:
        self.folder = root / name
        self.folder.mkdir()
        self.schema = SCHEMAS[name]
        self.rows = 0
        self.files = 0
        self._where: str | None = None
        self._writer: Any = None  # a pyarrow.parquet.ParquetWriter while a partition's file is open
        self._buffer: list[pa.RecordBatch] = []
        self._buffered = 0

    def start(self, partition: str) -> None:
        """Further rows go to ``partition`` (a :func:`partition_path`); its file appears with its first row."""
        self._close()
        self._where = partition

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.schema != self.schema:
            raise ValueError(f"{self.folder.name}: a batch of another schema: {batch.schema}")
        if batch.num_rows == 0:
            return
        self._buffer.append(batch)
        self._buffered += batch.num_rows
        self.rows += batch.num_rows
        if self._buffered >= ROW_GROUP_ROWS:
            self._flush()

    def close(self) -> None:
        self._close()
        self._where = None

    def _flush(self) -> None:
        if not self._buffer:
            return
        import pyarrow.parquet as pq

        if self._writer is None:
            assert self._where is not None, "write before start"
            path = self.folder / self._where / FILE_NAME
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():  # never overwrite: two names, one folder (a case-insensitive file system)
                raise UsageError(f"two kernel names share the folder {path.parent} on this file system")
            self._writer = pq.ParquetWriter(path, self.schema, compression="zstd")
            self.files += 1
        table = pa.Table.from_batches(self._buffer, schema=self.schema)
        self._writer.write_table(table, row_group_size=max(ROW_GROUP_ROWS, table.num_rows))
        self._buffer, self._buffered = [], 0

    def _close(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()
            self._writer = None


@contextlib.contextmanager
def staged_folder(
    target: Path, *, force: bool = False, keep: Sequence[tuple[Path, str]] = ()
) -> Iterator[Path]:
    """A new, empty folder beside ``target`` to write into; it becomes ``target`` when the block ends.

    ``target`` must not exist, or be an empty folder, or ``force`` must be given (then what is there is
    replaced, once the new folder is complete). A folder that is or holds one of ``keep`` (path, what it is:
    the history's files) or the working directory is never replaced. On an exception, or an interrupt, the
    staging folder is removed and ``target`` is as it was. A symlink to a folder stays a link: the folder it
    leads to is the one replaced.
    """
    given = target
    target = Path(os.path.realpath(target))
    full = os.path.lexists(target) and (not target.is_dir() or any(target.iterdir()))
    if full and not force:
        raise UsageError(f"{given} exists and is not an empty folder (--force replaces it)")
    for path, what in [*keep, (Path.cwd(), "the working directory")]:
        held = Path(os.path.realpath(path))
        if held == target or target in held.parents:
            raise UsageError(f"{given} holds {what} ({path}); it is never replaced")
    parent = target.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write into {parent}: not a writable folder")
    staging = _sibling(target, "partial")
    if target.is_dir():  # the folder keeps its permissions; a new one gets mkdir's (the umask's)
        staging.chmod(stat.S_IMODE(target.stat().st_mode))
    try:
        yield staging
        _swap_in(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_in(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``; what was at ``target`` goes aside first and is removed after."""
    if not os.path.lexists(target) or (target.is_dir() and not any(target.iterdir())):
        os.replace(staging, target)  # onto nothing, or onto an empty folder (rename(2) allows both)
        return
    if not target.is_dir():
        target.unlink()
        os.replace(staging, target)
        return
    aside = _sibling(target, "old")
    os.replace(target, aside)
    try:
        os.replace(staging, target)
    except BaseException:
        os.replace(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _sibling(target: Path, kind: str) -> Path:
    """A new hidden folder beside ``target``, made as ``mkdir`` makes one (tempfile's would be 0700: a dataset
    others cannot read). Its name is shortened: a target near the 255-byte limit still has room for it."""
    for attempt in range(100):
        path = target.parent / f".{target.name[:100]}-{os.getpid()}-{attempt}.{kind}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free name beside {target}")
