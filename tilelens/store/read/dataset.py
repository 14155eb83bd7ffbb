"""``tilelens export --dataset DIR``: the history's launches, arguments and trace lanes as a Hive-partitioned
Parquet dataset for DuckDB, Polars or Spark (layout and schemas: :mod:`tilelens.store.files.dataset`).

How it reads, so that a history of any size is exported in bounded memory:

1. one pass over the selected launches keeps four numbers per launch (id, kernel name, UTC day, trace blob);
2. launches are written in (kernel name, day, id) order, so each partition is written whole, one file per
   table, with one file per table open at a time;
3. rows come from the database ``CHUNK`` launches at a time, and each trace is decoded to lanes a bounded
   number at a time (:func:`tilelens.store.files.lanes.lane_table`);
4. a trace blob shared by several launches (a content hash: consecutive launches of one kernel often share
   one) is read once: it stays in memory, as compact as stored, until its last launch is written, as long as
   the kept traces fit in ``CACHE_BYTES``; and the lanes last decoded (up to ``REUSE_LANES``) serve the next
   launch of the same trace with its own launch id, without decoding again.
"""

from __future__ import annotations

import array
import datetime as dt
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tilelens.errors import BlobError, RunNotFoundError, UsageError
from tilelens.store.read.filters import in_list
from tilelens.store.read.results import DatasetExport, decode_json, decode_time
from tilelens.store.sql.readonly import Reader, storable_id

if TYPE_CHECKING:
    import pyarrow as pa

CHUNK = 500  # launches per query (an IN list well under SQLite's parameter limit)
CACHE_BYTES = 256 << 20  # shared traces kept for their later launches, at most
REUSE_LANES = 1 << 20  # the last trace's decoded lanes are kept for its next launch up to this many
MANIFEST = "dataset.json"

# Columns of launches (and launch_args) that later schema revisions added: NULL where a history predates them.
_LAUNCH_LATE = (
    "gpu_name",
    "oob_load_lanes",
    "oob_store_lanes",
    "dropped_lanes",
    "trace_derived",
    "test_nodeid",
)
_ARG_LATE = ("storage_bytes", "value_type", "distinct_elements", "snapshot_elements")

_LAUNCH_SQL = """
SELECT l.id, l.run_id, l.seq, l.started_at, l.duration_s, l.kernel_id, k.module, k.qualname, k.source_sha256,
       l.cache_key, l.grid_x, l.grid_y, l.grid_z, l.role, l.status, l.error, l.backend, l.device, {gpu_name},
       l.config, l.tuning_key, l.loads, l.stores, l.atomics, l.events, l.lanes,
       l.load_lanes + l.store_lanes + l.atomic_lanes, l.load_lanes, l.store_lanes, l.atomic_lanes,
       l.bytes_loaded, l.bytes_stored, l.oob_lanes, {oob_load_lanes}, {oob_store_lanes}, {dropped_lanes},
       l.trace_blob, l.trace_rows, {trace_derived}, {test_nodeid}, r.tag
FROM launches l JOIN kernels k ON k.id = l.kernel_id JOIN runs r ON r.id = l.run_id
WHERE l.id IN ({ids}) ORDER BY l.id
"""
_ARG_SQL = """
SELECT launch_id, position, name, kind, dtype, shape, strides, storage_offset, storage_group, {storage_bytes},
       device, value, {value_type}, access, {distinct_elements}, {snapshot_elements}, before_blob, after_blob
FROM launch_args WHERE launch_id IN ({ids}) ORDER BY launch_id, position
"""


def export_dataset(
    reader: Reader,
    trace_table: Callable[[str], pa.Table],
    folder: str | Path,
    *,
    runs: Sequence[int] | None = None,
    force: bool = False,
) -> DatasetExport:
    """Write the launches of ``runs`` (every run when None) as a dataset in ``folder`` (see the module docstring).

    ``folder`` must be new or an empty folder unless ``force``; it appears whole or not at all. An unknown run
    is a :class:`RunNotFoundError` before anything is written.
    """
    from tilelens.store.files import dataset as files

    selected = _known_runs(reader, runs)
    location = reader.location
    keep = [(location.blobs_dir, "the history's blobs")]
    if location.sqlite_path is not None:
        keep.append((location.sqlite_path, "the history"))
    blobs = Path(os.path.realpath(location.blobs_dir))
    if blobs in Path(os.path.realpath(folder)).parents:  # gc and db copy own every file in there
        raise UsageError(
            f"{folder} is inside the history's blob folder {location.blobs_dir}; write it elsewhere"
        )
    with files.staged_folder(Path(folder), force=force, keep=keep) as root:
        plan = _plan(reader, selected)
        tables = {name: files.PartitionedTable(root, name) for name in files.SCHEMAS}
        traces = _Traces(trace_table, plan)
        launch_sql = _late(reader, "launches", _LAUNCH_LATE, _LAUNCH_SQL)
        arg_sql = _late(reader, "launch_args", _ARG_LATE, _ARG_SQL)
        for start, stop in plan.partitions():
            where = files.partition_path(plan.kernels[plan.kernel[start]], plan.days[plan.day[start]])
            for table in tables.values():
                table.start(where)
            for at in range(start, stop, CHUNK):
                ids = [int(i) for i in plan.ids[at : min(stop, at + CHUNK)]]
                tables["launches"].write(_launch_batch(reader, launch_sql, ids))
                batch, names = _argument_batch(reader, arg_sql, ids)
                tables["arguments"].write(batch)
                for index in range(at, at + len(ids)):
                    if plan.blob[index] < 0:
                        continue
                    launch_id = int(plan.ids[index])
                    for lanes in traces.lanes(int(plan.blob[index]), launch_id, names.get(launch_id, {})):
                        tables["trace_lanes"].write(lanes)
        for table in tables.values():
            table.close()
        result = DatasetExport(
            path=Path(folder),
            runs=selected,
            rows={name: t.rows for name, t in tables.items()},
            files={name: t.files for name, t in tables.items()},
            kernels=len(plan.kernels),
            partitions=plan.partition_count(),
            traces_read=traces.reads,
        )
        (root / MANIFEST).write_text(json.dumps(_manifest(reader, result), indent=1) + "\n")
    return result


def _known_runs(reader: Reader, runs: Sequence[int] | None) -> list[int] | None:
    """The runs asked for, sorted; :class:`RunNotFoundError` naming those the history does not have."""
    if runs is None:
        return None
    wanted = sorted({int(r) for r in runs})
    storable = [r for r in wanted if storable_id(r)]
    found: set[int] = set()
    for at in range(0, len(storable), CHUNK):
        ids, params = in_list(storable[at : at + CHUNK])
        found |= {int(r[0]) for r in reader.execute(f"SELECT id FROM runs WHERE id IN ({ids})", params).rows}
    missing = [r for r in wanted if r not in found]
    if missing:
        raise RunNotFoundError(f"no run {', '.join(map(str, missing))} in history {reader.label}")
    return wanted


def _late(reader: Reader, table: str, late: Sequence[str], sql: str) -> str:
    """``sql`` with each of ``late`` as the column, or NULL where this history's schema predates it."""
    have = set(reader.execute(f"SELECT * FROM {table} WHERE 1 = 0").columns)
    prefix = "l." if table == "launches" else ""
    fields = {name: f"{prefix}{name}" if name in have else "NULL" for name in late}
    return sql.format(ids="{ids}", **fields)


@dataclass
class _Plan:
    """The selected launches in writing order: ids and, as codes into the lists, kernel name, day and blob."""

    ids: np.ndarray
    kernel: np.ndarray
    day: np.ndarray
    blob: np.ndarray  # -1: no trace
    kernels: list[str]
    days: list[str]
    blobs: list[str]

    def partitions(self) -> Iterator[tuple[int, int]]:
        """``[start, stop)`` of each (kernel, day) run of launches."""
        if not self.ids.size:
            return
        change = np.flatnonzero((np.diff(self.kernel) != 0) | (np.diff(self.day) != 0)) + 1
        bounds = [0, *change.tolist(), int(self.ids.size)]
        yield from zip(bounds[:-1], bounds[1:])

    def partition_count(self) -> int:
        return sum(1 for _ in self.partitions())


def _plan(reader: Reader, runs: list[int] | None) -> _Plan:
    where, params = "", dict[str, int]()
    if runs is not None:
        names, params = in_list(runs)
        where = f"WHERE l.run_id IN ({names})" if runs else "WHERE 1 = 0"
    sql = (
        "SELECT l.id, k.module, k.qualname, l.started_at, l.trace_blob "
        f"FROM launches l JOIN kernels k ON k.id = l.kernel_id {where} ORDER BY l.id"
    )
    kernels: dict[str, int] = {}
    days: dict[str, int] = {}
    blobs: dict[str, int] = {}
    # Machine integers, 8 bytes a launch each: a history of millions of launches plans in tens of MB.
    columns = tuple(array.array("q") for _ in range(4))
    with reader.stream(sql, params) as rows:
        for launch_id, module, qualname, started_at, blob in rows:
            columns[0].append(int(launch_id))
            columns[1].append(kernels.setdefault(f"{module}.{qualname}", len(kernels)))
            columns[2].append(days.setdefault(_day(started_at), len(days)))
            columns[3].append(-1 if blob is None else blobs.setdefault(str(blob), len(blobs)))
    ids, kernel, day, blob = (
        np.frombuffer(c, dtype=np.int64) if len(c) else np.zeros(0, np.int64) for c in columns
    )
    # Partitions in name and date order; within one, launches by id.
    order = np.lexsort((ids, _ranks(days)[day], _ranks(kernels)[kernel]))
    return _Plan(ids[order], kernel[order], day[order], blob[order], list(kernels), list(days), list(blobs))


def _ranks(codes: dict[str, int]) -> np.ndarray:
    """Each code's place when its strings are sorted."""
    ranks = np.zeros(len(codes), dtype=np.int64)
    for rank, name in enumerate(sorted(codes)):
        ranks[codes[name]] = rank
    return ranks


def _day(started_at: Any) -> str:
    moment = decode_time(started_at)
    assert moment is not None, "launches.started_at is NOT NULL"
    return moment.date().isoformat()


class _Traces:
    """Each launch's lanes, reading each trace blob once while the kept ones fit in CACHE_BYTES (then again).

    The lanes last decoded are kept too, up to REUSE_LANES of them: the next launch of the same trace and
    argument names (the common case: consecutive launches of one kernel) gets them with its own launch id,
    without decoding again.
    """

    def __init__(self, read: Callable[[str], pa.Table], plan: _Plan) -> None:
        self.read = read
        self.blobs = plan.blobs
        used = plan.blob[plan.blob >= 0]
        self.remaining = np.bincount(used, minlength=len(plan.blobs)) if used.size else np.zeros(0, np.int64)
        self.kept: dict[int, pa.Table] = {}
        self.kept_bytes = 0
        self.reads = 0
        self.decoded: tuple[Any, list[pa.RecordBatch]] = (None, [])

    def lanes(self, code: int, launch_id: int, names: dict[int, str]) -> Iterator[pa.RecordBatch]:
        """The lanes of launch ``launch_id``, whose trace is blob ``code`` (LANE_SCHEMA batches)."""
        import pyarrow as pa

        from tilelens.store.files.lanes import column_array, lane_table

        key = (code, tuple(sorted(names.items())))
        if self.decoded[0] == key:
            self._release(code)
            for batch in self.decoded[1]:
                ids = pa.array(np.full(batch.num_rows, launch_id, dtype=np.int64))
                yield batch.set_column(0, batch.schema.field(0), ids)
            return
        trace = self.get(code, launch_id)
        if int(column_array(trace, "lanes", np.int64).sum()) > REUSE_LANES:
            yield from lane_table(trace, launch_id, names)
            return
        self.decoded = (None, [])
        batches = list(lane_table(trace, launch_id, names))
        self.decoded = (key, batches)
        yield from batches

    def get(self, code: int, launch_id: int) -> pa.Table:
        table = self.kept.get(code)
        if table is None:
            try:
                table = self.read(self.blobs[code])
            except BlobError as exc:  # the blob's own message names the file; say whose trace it is
                exc.args = (f"launch {launch_id}'s access trace: {exc}",)
                raise
            self.reads += 1
            if self.remaining[code] > 1 and self.kept_bytes + table.nbytes <= CACHE_BYTES:
                self.kept[code] = table
                self.kept_bytes += table.nbytes
        self._release(code)
        return table

    def _release(self, code: int) -> None:
        """One launch of blob ``code`` is written: forget the trace after its last one."""
        self.remaining[code] -= 1
        if self.remaining[code] == 0 and code in self.kept:
            self.kept_bytes -= self.kept.pop(code).nbytes


def _json_text(value: Any) -> str | None:
    """A JSON column as its stored text (a driver that parsed it gets it written back)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode()
    return json.dumps(value)


def _int_list(value: Any) -> list[int] | None:
    items = decode_json(value)
    return None if items is None else [int(v) for v in items]


def _bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


# Per column of the launch query: how a driver's value becomes the schema's (None: as it comes).
_LAUNCH_CONVERT: dict[str, Callable[[Any], Any]] = {
    "started_at": decode_time,
    "config": _json_text,
    "trace_derived": _bool,
}
_ARG_CONVERT: dict[str, Callable[[Any], Any]] = {
    "shape": _int_list,
    "strides": _int_list,
    "value": _json_text,
    "access": _json_text,
}


def _batch(
    schema: pa.Schema, rows: Sequence[Sequence[Any]], convert: dict[str, Callable[[Any], Any]]
) -> pa.RecordBatch:
    import pyarrow as pa

    columns = list(zip(*rows)) if rows else [() for _ in schema]
    arrays = []
    for field, values in zip(schema, columns, strict=True):
        how = convert.get(field.name)
        arrays.append(pa.array([how(v) for v in values] if how else list(values), type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _launch_batch(reader: Reader, sql: str, ids: list[int]) -> pa.RecordBatch:
    from tilelens.store.files.dataset import LAUNCH_SCHEMA

    names, params = in_list(ids)
    rows = reader.execute(sql.format(ids=names), params).rows
    return _batch(LAUNCH_SCHEMA, rows, _LAUNCH_CONVERT)


def _argument_batch(
    reader: Reader, sql: str, ids: list[int]
) -> tuple[pa.RecordBatch, dict[int, dict[int, str]]]:
    """The arguments of launches ``ids``, and per launch its argument names by position (for the lanes)."""
    from tilelens.store.files.dataset import ARGUMENT_SCHEMA

    names, params = in_list(ids)
    rows = [
        (*r, r[17] is not None and r[17] != r[16])  # written: after_blob differs from before_blob
        for r in reader.execute(sql.format(ids=names), params).rows
    ]
    by_launch: dict[int, dict[int, str]] = {}
    for r in rows:
        by_launch.setdefault(int(r[0]), {})[int(r[1])] = str(r[2])
    return _batch(ARGUMENT_SCHEMA, rows, _ARG_CONVERT), by_launch


def _manifest(reader: Reader, result: DatasetExport) -> dict[str, Any]:
    """``DIR/dataset.json``: what was exported from where, and each table's rows, files and columns."""
    from tilelens.store.files.dataset import PARTITION_KEYS, SCHEMAS
    from tilelens.version import __version__

    return {
        "format": "tilelens-dataset",
        "version": 1,
        "tilelens": __version__,
        "history": reader.label,
        "runs": result.runs,
        "exported_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "partitioning": {"flavor": "hive", "keys": list(PARTITION_KEYS)},
        "tables": {
            name: {
                "rows": result.rows[name],
                "files": result.files[name],
                "columns": {field.name: str(field.type) for field in schema},
            }
            for name, schema in SCHEMAS.items()
        },
    }
