"""Reading a history: the answers ``tilelens ls``, ``show``, ``sql`` and ``export`` render, as a Python API.

The command line only formats what this module returns, so anything the CLI shows is also available from
Python with the same names (and the ``as_dict()`` of each result is exactly the CLI's ``--json``)::

    from tilelens import open_query  # this module's, through the public API

    with open_query("runs/h.db") as q:
        for launch in q.launches(kernel="matmul_kernel", oob=True, limit=10):
            print(launch.id, launch.grid, launch.oob_lanes)
        detail = q.launch(42, source=True)

Reads never create or migrate a history and never import torch, Triton or Alembic; see
:mod:`tilelens.store.sql.readonly` for how the database is opened. The results are the plain data classes of
:mod:`tilelens.store.read.results`.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tilelens.config import Location, resolve_location
from tilelens.errors import (
    BlobError,
    LaunchNotFoundError,
    NoHistoryError,
    NoTraceError,
    QueryError,
    UsageError,
)
from tilelens.records import RUN_STATUSES
from tilelens.store.files.oobsample import sampled_events
from tilelens.store.read.coverage_rows import CoverageLaunch, coverage_launches, kernel_infos
from tilelens.store.read.filters import Filter as _Filter
from tilelens.store.read.filters import in_list, kernel_clause, launch_filter, test_summaries
from tilelens.store.read.results import (
    AccessStats,
    ArgumentInfo,
    AutotuneInfo,
    DatasetExport,
    ExportResult,
    KernelInfo,
    LaunchDetail,
    LaunchSummary,
    OobEvent,
    ReplayInfo,
    RunSummary,
    SourceLine,
    TestSummary,
    annotated_source,
    decode_json,
    decode_time,
    int_or_none,
    launch_summary_of,
    oob_event_of,
)
from tilelens.store.sql.names import KERNEL_NAMES_SQL, matching_ids
from tilelens.store.sql.readonly import (
    Reader,
    Result,
    RowStream,
    open_reader,
    row_limit,
    storable_id,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from tilelens.store.read.catalog import TableInfo

EXPORT_FORMATS = ("parquet", "csv")
ExportFormat = Literal["parquet", "csv"]
# What is not a statement: comments (whitespace and ``;`` aside). A query of only these is refused as empty.
_STATEMENT_TEXT = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
NO_STATEMENT = "no query given (an empty statement, or only comments)"
_TRACE_EVENTS = re.compile(r"\btrace_events\b", re.IGNORECASE)


# -- the query object ---------------------------------------------------------------------------------------

# Launch columns added by schema 0003: a history from before it reads NULL, "not split", as do launches
# recorded before 0003 in an upgraded history.
SPLIT_FIELDS = ("oob_load_lanes", "oob_store_lanes", "dropped_lanes")

_LAUNCH_SELECT = """
SELECT l.id, l.run_id, l.seq, l.started_at, l.duration_s, k.module, k.qualname,
       l.grid_x, l.grid_y, l.grid_z, l.config, l.tuning_key, l.role, l.status, l.error, l.backend, l.device,
       l.lanes, l.load_lanes + l.store_lanes + l.atomic_lanes, l.oob_lanes, l.bytes_loaded, l.bytes_stored,
       {fields}
FROM launches l JOIN kernels k ON k.id = l.kernel_id
"""

SUMMARY_FIELDS = (
    "loads",
    "stores",
    "atomics",
    "load_lanes",
    "store_lanes",
    "atomic_lanes",
    "bytes_loaded",
    "bytes_stored",
    "oob_lanes",
    "events",
    "lanes",
    "oob_load_lanes",
    "oob_store_lanes",
    "dropped_lanes",
)


class HistoryQuery:
    """Read-only queries over one history; use :func:`open_query` and close it (or use ``with``)."""

    def __init__(self, location: Location, reader: Reader) -> None:
        self.location = location
        self.reader = reader

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> HistoryQuery:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return self.reader.execute(sql, params).rows

    @functools.cached_property
    def _launch_columns(self) -> frozenset[str]:
        """The columns of ``launches``: reading never migrates, so a history may predate 0003's or 0007's."""
        return frozenset(self.reader.execute("SELECT * FROM launches WHERE 1 = 0").columns)

    def _launch_fields(self, names: Sequence[str]) -> str:
        """``l.NAME`` for each of ``names``; NULL for a column this history's schema predates (read as unknown)."""
        have = self._launch_columns
        return ", ".join(f"l.{name}" if name in have else f"NULL AS {name}" for name in names)

    @functools.cached_property
    def _arg_late(self) -> dict[str, str]:
        """``distinct_elements`` (0011) and ``snapshot_elements`` (0014), or NULL where the history predates them
        (distinct elements are then computed from traces; snapshots were whole)."""
        have = self.reader.execute("SELECT * FROM launch_args WHERE 1 = 0").columns
        names = ("distinct_elements", "snapshot_elements")
        return {name.split("_")[0]: name if name in have else "NULL" for name in names}

    @property
    def _has_procs_columns(self) -> bool:
        """Whether the history has revision 0007's columns; an older history is read with NULLs instead."""
        return "test_nodeid" in self._launch_columns

    @property
    def _launch_select(self) -> str:
        return _LAUNCH_SELECT.format(fields=self._launch_fields(("test_nodeid", *SPLIT_FIELDS)))

    # -- listings -----------------------------------------------------------------------------------------

    def kernel_ids(self, name: str) -> list[int]:
        """Kernels named ``name``: a qualname or module.qualname, ``*``/``?`` wildcards (``tilelens.store.sql.names``)."""
        return matching_ids(name, self._rows(KERNEL_NAMES_SQL))

    def _kernel_clause(self, f: _Filter, name: str, column: str) -> bool:
        return kernel_clause(f, self.kernel_ids(name), column)

    def launches(
        self,
        *,
        kernel: str | None = None,
        run: int | None = None,
        status: str | None = None,
        oob: bool = False,
        tag: str | None = None,
        test: str | None = None,
        limit: int | None = 50,
    ) -> list[LaunchSummary]:
        """Launches, newest first; every filter given must hold.

        ``test`` matches the pytest node id: ``*``/``?`` wildcards over the whole id, else any id containing it.
        """
        f = self._launch_filter(kernel, run, status, oob, tag, test)
        if f is None:
            return []
        sql = f"{self._launch_select} {f.sql()} ORDER BY l.id DESC"
        if limit is not None:
            sql += " LIMIT :limit"
            f.params["limit"] = row_limit(limit)
        return [launch_summary_of(r) for r in self._rows(sql, f.params)]

    def _launch_filter(
        self,
        kernel: str | None,
        run: int | None,
        status: str | None,
        oob: bool,
        tag: str | None,
        test: str | None,
    ) -> _Filter | None:
        """The WHERE clause over ``launches l`` of :meth:`launches`' filters; None when nothing can match."""
        return launch_filter(self.kernel_ids, kernel, run, status, oob, tag, test)

    def tests(
        self,
        *,
        kernel: str | None = None,
        run: int | None = None,
        status: str | None = None,
        oob: bool = False,
        tag: str | None = None,
        limit: int | None = 50,
    ) -> list[TestSummary]:
        """The pytest tests that launched kernels (of the launches the filters keep), most recent first."""
        f = self._launch_filter(kernel, run, status, oob, tag, None)
        return [] if f is None else test_summaries(self._rows, f, limit)

    def coverage_launches(
        self,
        *,
        kernel: str | None = None,
        run: int | None = None,
        test: str | None = None,
        runs: Sequence[int] | None = None,
    ) -> list[CoverageLaunch]:
        """The program's launches (no autotune trials) the filters keep, oldest first, as coverage reads them:
        kernel version, test, backend, trace and executed lines (``tilelens.analysis.coverage``). ``runs``:
        launches of these runs only (a run and its child runs)."""
        f = self._launch_filter(kernel, run, None, False, None, test)
        has_lines = "executed_lines" in self._launch_columns
        return [] if f is None else coverage_launches(self._rows, f, runs, has_lines)

    def kernel_infos(self, kernel_ids: Sequence[int]) -> dict[int, KernelInfo]:
        """Kernel versions by id, with their sources."""
        return kernel_infos(self._rows, kernel_ids)

    def runs(
        self,
        *,
        kernel: str | None = None,
        run: int | None = None,
        status: str | None = None,
        oob: bool = False,
        tag: str | None = None,
        limit: int | None = 50,
    ) -> list[RunSummary]:
        """Runs, newest first, with launch counts; ``kernel`` and ``oob`` keep runs with such launches.

        A run stored as ``running`` whose process is gone reads ``lost`` (and is filtered as such) at once,
        before any writer has stored that, as in every SQL over this reader (:mod:`tilelens.store.sql.runstatus`).
        """
        if status is not None and status not in RUN_STATUSES:
            raise UsageError(f"run status must be one of {', '.join(RUN_STATUSES)}, not {status!r}")
        f = _Filter()
        if kernel is not None:
            inner = _Filter()
            if not self._kernel_clause(inner, kernel, "l.kernel_id"):
                return []
            f.add(
                f"EXISTS (SELECT 1 FROM launches l WHERE l.run_id = r.id AND {inner.clauses[0]})",
                **inner.params,
            )
        if run is not None:
            if not storable_id(run):
                return []
            f.add("r.id = :run", run=run)
        if status is not None:
            f.add("r.status = :status", status=status)
        if oob:
            f.add("EXISTS (SELECT 1 FROM launches l WHERE l.run_id = r.id AND l.oob_lanes > 0)")
        if tag is not None:
            f.add("r.tag = :tag", tag=tag)
        sql = (
            "SELECT r.id, r.started_at, r.finished_at, r.status, r.exit_code, r.tag, r.argv, r.cwd, r.host, "
            + ("r.parent_run_id, r.pid " if self._has_procs_columns else "NULL, NULL ")
            + f"FROM runs r {f.sql()} ORDER BY r.id DESC"
        )
        if limit is not None:
            sql += " LIMIT :limit"
            f.params["limit"] = row_limit(limit)
        runs = self._rows(sql, f.params)
        counts: dict[int, tuple[Any, ...]] = {}
        if runs:
            marks, ids = in_list([r[0] for r in runs], "r")
            for row in self._rows(
                "SELECT run_id, COUNT(*), COUNT(DISTINCT kernel_id), "
                "SUM(CASE WHEN status = 'error' THEN 1 ELSE 0 END), SUM(oob_lanes) "
                f"FROM launches WHERE run_id IN ({marks}) GROUP BY run_id",
                ids,
            ):
                counts[row[0]] = row[1:]
        out = []
        for r in runs:
            n, kernels, errors, oob_lanes = counts.get(r[0], (0, 0, 0, 0))
            out.append(
                RunSummary(
                    id=int(r[0]),
                    started_at=decode_time(r[1]),  # type: ignore[arg-type]
                    finished_at=decode_time(r[2]),
                    status=r[3],
                    exit_code=r[4],
                    tag=r[5],
                    argv=list(decode_json(r[6]) or []),
                    cwd=r[7],
                    host=r[8],
                    launches=int(n or 0),
                    kernels=int(kernels or 0),
                    errors=int(errors or 0),
                    oob_lanes=int(oob_lanes or 0),
                    parent_run_id=r[9],
                    pid=r[10],
                )
            )
        return out

    # -- one launch ---------------------------------------------------------------------------------------

    def launch(self, launch_id: int, *, oob_events: int = 10, source: bool = False) -> LaunchDetail:
        """Everything about one launch; ``source=True`` adds per-line lane counts beside the kernel source."""
        rows = (
            self._rows(f"{self._launch_select} WHERE l.id = :id", {"id": launch_id})
            if storable_id(launch_id)
            else []
        )
        if not rows:
            raise LaunchNotFoundError(f"no launch {launch_id} in history {self.reader.label}")
        launch = launch_summary_of(rows[0])
        (extra,) = self._rows(
            "SELECT k.id, k.file, k.def_line, k.source_sha256, k.source, l.cache_key, "
            "r.id, r.tag, r.status, r.argv, l.unattributed, l.trace_blob, l.trace_rows, l.trace_bytes, "
            f"{self._launch_fields((*SUMMARY_FIELDS, 'oob_sample'))} "
            "FROM launches l JOIN kernels k ON k.id = l.kernel_id JOIN runs r ON r.id = l.run_id "
            "WHERE l.id = :id",
            {"id": launch_id},
        )
        kernel = KernelInfo(
            id=int(extra[0]),
            module=launch.module,
            qualname=launch.qualname,
            file=extra[1],
            def_line=int(extra[2]),
            cache_key=extra[5],
            source_sha256=extra[3],
            source=extra[4],
        )
        run = {
            "id": int(extra[6]),
            "tag": extra[7],
            "status": extra[8],
            "argv": list(decode_json(extra[9]) or []),
        }
        summary = {name: int_or_none(value) for name, value in zip(SUMMARY_FIELDS, extra[14:-1])}
        sampled = sampled_events(decode_json(extra[-1]), oob_events) if launch.oob_lanes else ([], 0)
        unattributed_summary = decode_json(extra[10])
        trace_info = (
            {"blob": extra[11], "rows": extra[12], "bytes": extra[13]} if extra[11] is not None else None
        )

        arg_rows = self._rows(_ARGS_SELECT.format(**self._arg_late), {"id": launch_id})
        # The trace is read only for what the rows do not hold: Parquet means importing pyarrow, a third of
        # this command's time. Launches recorded since migration 0011 store each argument's distinct elements
        # (column 13), which spares it for those without out-of-bounds lanes.
        stored = all(r[10] is None or r[13] is not None for r in arg_rows)
        need_trace = source or sampled is None or not stored
        trace, trace_error = None, None
        if trace_info is not None and need_trace:
            try:
                trace = self.trace_table(trace_info["blob"])
            except BlobError as exc:
                trace_error = str(exc)

        distinct = None
        if trace is not None:
            from tilelens.store.files import lanes

            distinct = lanes.distinct_elements(trace)
        args = [self._argument(r, distinct) for r in arg_rows]
        unattributed = AccessStats.of(unattributed_summary, None) if unattributed_summary else None

        names = {a.position: a.name for a in args}
        events = [oob_event_of(row, names, kernel) for row in (sampled[0] if sampled else [])]
        event_count = sampled[1] if sampled else 0
        if sampled is None and trace is not None and launch.oob_lanes:
            from tilelens.store.files import lanes

            found = lanes.oob_rows(trace, oob_events)
            event_count = found.total
            events = [oob_event_of(row, names, kernel) for row in found.rows]

        source_lines = None
        if source:
            from tilelens.store.files import lanes

            source_lines = annotated_source(kernel, lanes.line_counts(trace) if trace is not None else {})

        return LaunchDetail(
            launch=launch,
            run=run,
            kernel=kernel,
            summary=summary,
            args=args,
            unattributed=unattributed,
            trace=trace_info,
            trace_error=trace_error,
            oob_events=events,
            oob_event_count=event_count,
            autotune=self._autotune(launch_id),
            replays=self._replays(launch_id),
            source_lines=source_lines,
        )

    def _argument(self, r: Sequence[Any], distinct: dict[int, int] | None) -> ArgumentInfo:
        access = decode_json(r[10])
        position = int(r[0])
        if distinct is None and r[13] is not None:
            distinct = {position: int(r[13])}
        return ArgumentInfo(
            position=position,
            name=r[1],
            kind=r[2],
            dtype=r[3],
            shape=decode_json(r[4]),
            strides=decode_json(r[5]),
            storage_offset=r[6],
            storage_group=r[7],
            device=r[8],
            value=decode_json(r[9]),
            before_blob=r[11],
            after_blob=r[12],
            snapshot_elements=None if r[14] is None else int(r[14]),
            access=(
                AccessStats.of(access, distinct.get(position, 0) if distinct is not None else None)
                if access is not None
                else None
            ),
        )

    def _autotune(self, launch_id: int) -> list[AutotuneInfo]:
        rows = self._rows(
            "SELECT id, tuning_key, configs, timings, chosen, cache_hit, created_at "
            "FROM autotune_events WHERE launch_id = :id ORDER BY id",
            {"id": launch_id},
        )
        return [
            AutotuneInfo(
                id=int(r[0]),
                tuning_key=r[1],
                configs=decode_json(r[2]) or [],
                timings=decode_json(r[3]),
                chosen=decode_json(r[4]) or {},
                cache_hit=bool(r[5]),
                created_at=decode_time(r[6]),  # type: ignore[arg-type]
            )
            for r in rows
        ]

    def _replays(self, launch_id: int) -> list[ReplayInfo]:
        rows = self._rows(
            "SELECT id, device, backend, outcome, max_abs_err, max_rel_err, trace_equal, message, created_at "
            "FROM replays WHERE launch_id = :id ORDER BY id",
            {"id": launch_id},
        )
        return [
            ReplayInfo(
                id=int(r[0]),
                device=r[1],
                backend=r[2],
                outcome=r[3],
                max_abs_err=r[4],
                max_rel_err=r[5],
                trace_equal=None if r[6] is None else bool(r[6]),
                message=r[7],
                created_at=decode_time(r[8]),  # type: ignore[arg-type]
            )
            for r in rows
        ]

    # -- traces -------------------------------------------------------------------------------------------

    def trace_file(self, sha256: str) -> Path:
        """A trace blob's file, its content hash verified first: DuckDB reads it itself."""
        from tilelens.store.files.blobs import BlobStore

        (blobs := BlobStore(self.location.blobs_dir)).verify(sha256)
        return blobs.path(sha256)

    def trace_table(self, sha256: str, columns: Sequence[str] | None = None) -> pa.Table:
        """The trace blob ``sha256`` (only ``columns`` when given)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from tilelens.store.files.blobs import BlobStore

        # get_bytes verifies the content hash; ParquetFile reads it without pyarrow.dataset, whose import
        # alone (what pq.read_table pulls in) costs a sixth of show's time budget.
        data = BlobStore(self.location.blobs_dir).get_bytes(sha256)
        return pq.ParquetFile(pa.BufferReader(data)).read(
            columns=list(columns) if columns is not None else None, use_threads=False
        )

    def trace(self, launch_id: int) -> pa.Table:
        """The launch's access trace as recorded: one row per memory event (``TRACE_SCHEMA``)."""
        rows = (
            self._rows("SELECT trace_blob, backend FROM launches WHERE id = :id", {"id": launch_id})
            if storable_id(launch_id)
            else []
        )
        if not rows:
            raise LaunchNotFoundError(f"no launch {launch_id} in history {self.reader.label}")
        if rows[0][0] is None:
            how = f"; derive it with `tilelens trace {launch_id}`" if rows[0][1] == "compiled" else ""
            raise NoTraceError(f"launch {launch_id} has no access trace{how}")
        try:
            return self.trace_table(rows[0][0])
        except BlobError as exc:  # the blob's own message names the file; say whose trace it is
            exc.args = (f"launch {launch_id}'s access trace: {exc}",)
            raise

    def lane_batches(self, launch_id: int) -> Iterator[pa.RecordBatch]:
        """The trace as one flat row per lane (``tilelens.store.files.lanes.LANE_SCHEMA``), in record batches."""
        from tilelens.store.files import lanes

        trace = self.trace(launch_id)
        names = {r[0]: r[1] for r in self._rows(_ARG_NAMES, {"id": launch_id})}
        return lanes.lane_table(trace, launch_id, names)

    def lane_table(self, launch_id: int) -> pa.Table:
        """:meth:`lane_batches` as one table, for pandas (``.to_pandas()``) or polars."""
        import pyarrow as pa

        from tilelens.store.files import lanes

        return pa.Table.from_batches(list(self.lane_batches(launch_id)), schema=lanes.LANE_SCHEMA)

    def export(self, launch_id: int, path: str | Path, format: ExportFormat = "parquet") -> ExportResult:
        """Write :meth:`lane_batches` to ``path`` (``"-"``: standard output) by the rules of
        :func:`tilelens.store.files.outfile.open_output`: a regular file appears whole or not at all, a FIFO, a
        device or a file descriptor is written through and never replaced."""
        if format not in EXPORT_FORMATS:
            raise UsageError(f"export format must be one of {', '.join(EXPORT_FORMATS)}, not {format!r}")
        from tilelens.store.files.outfile import write_lanes

        rows = write_lanes(self.lane_batches(launch_id), path, format)
        return ExportResult(path=Path(path), format=format, rows=rows)

    def export_dataset(
        self, folder: str | Path, *, runs: Sequence[int] | None = None, force: bool = False
    ) -> DatasetExport:
        """The launches of ``runs`` (every run when None), their arguments and their trace lanes as a Hive-
        partitioned Parquet dataset in ``folder`` (new or empty unless ``force``), by kernel and day: see
        :mod:`tilelens.store.read.dataset`. The folder appears whole or not at all."""
        from tilelens.store.read.dataset import export_dataset

        return export_dataset(self.reader, self.trace_table, folder, runs=runs, force=force)

    # -- SQL ----------------------------------------------------------------------------------------------

    def tables(self) -> list[TableInfo]:
        """The tables and views a query can name, with their columns, and ``trace_events``."""
        from tilelens.store.read.catalog import tables

        return tables(self.reader)

    def sql(self, query: str, *, timeout: float | None = None) -> Result:
        """One read-only statement (the views of migration 0002 included); writes raise ReadOnlyError."""
        with self.sql_stream(query, timeout=timeout) as rows:
            return Result(rows.columns, list(rows))

    def sql_stream(
        self, query: str, *, timeout: float | None = None, cancel: threading.Event | None = None
    ) -> RowStream:
        """:meth:`sql` with the rows handed out as they come, in constant memory; close the stream.

        ``timeout`` (seconds) and ``cancel`` stop a runaway query (``QueryTimeoutError``,
        ``QueryInterruptedError``): see :meth:`tilelens.store.sql.readonly.Reader.stream`.
        """
        if timeout is not None and not timeout > 0:
            raise UsageError(f"a query timeout is a positive number of seconds, not {timeout!r}")
        if not _STATEMENT_TEXT.sub(" ", query).replace(";", " ").strip():
            raise UsageError(NO_STATEMENT)
        if _TRACE_EVENTS.search(query):  # across traces: DuckDB, see tilelens.store.read.tracesql
            from tilelens.store.read import tracesql

            return tracesql.stream(self.reader, self.trace_file, query, timeout=timeout, cancel=cancel)
        try:
            return self.reader.stream(query, timeout=timeout, cancel=cancel)
        except QueryError as exc:
            from tilelens.store.read.catalog import views_missing

            views = views_missing(self.reader.revisions, exc)
            if views is None:
                raise
            raise views from exc


_ARGS_SELECT = (
    "SELECT position, name, kind, dtype, shape, strides, storage_offset, storage_group, device, value, "
    "access, before_blob, after_blob, {distinct}, {snapshot} FROM launch_args WHERE launch_id = :id "
    "ORDER BY position"
)
_ARG_NAMES = "SELECT position, name FROM launch_args WHERE launch_id = :id"


def open_query(
    db: str | None = None,
    blobs: str | Path | None = None,
    *,
    location: Location | None = None,
) -> HistoryQuery:
    """Open the history at ``db``/``blobs`` (resolved like every TileLens command) for reading only.

    Raises :class:`tilelens.errors.NoHistoryError` when nothing is there: reading never creates one.
    """
    location = location or resolve_location(db, blobs)
    return HistoryQuery(location, open_reader(location))


__all__ = [
    "AccessStats",
    "ArgumentInfo",
    "AutotuneInfo",
    "DatasetExport",
    "ExportResult",
    "HistoryQuery",
    "KernelInfo",
    "LaunchDetail",
    "LaunchNotFoundError",
    "LaunchSummary",
    "NoHistoryError",
    "NoTraceError",
    "OobEvent",
    "ReplayInfo",
    "Result",
    "RowStream",
    "RunSummary",
    "SourceLine",
    "TestSummary",
    "open_query",
]
