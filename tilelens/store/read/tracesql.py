"""SQL across the access traces of many launches: the ``trace_events`` table of ``tilelens sql``.

A query that mentions ``trace_events`` runs in an in-memory DuckDB (the ``duckdb`` extra), not in the history's
database, which cannot read Parquet blobs. What it sees:

- ``trace_events``: one row per lane of every recorded trace, the columns ``tilelens export`` writes
  (``launch_id, pid_x, pid_y, pid_z, event, op, arg, arg_name, line, lane, offset, active, oob``);
- every history table or view the query names (``launches``, ``launch_overview``, ...), read through the
  history's own read-only connection (:class:`~tilelens.store.sql.readonly.Reader`) and handed over as Arrow.

Read-only by construction: the DuckDB database lives in memory and holds copies; it is opened with external
access off (no file, no network, no extension can be read or written: ``read_csv``, ``COPY``, ``ATTACH``,
``INSTALL`` fail) and its configuration locked before the user's statement is even parsed; the statement
itself passes the same kind of gate as on PostgreSQL first (one statement, reading verbs only, functions that
read files refused by name), so a refusal is one clear line. Other queries never come here.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tilelens.errors import QueryError, UsageError
from tilelens.store.sql.pgreader import ALLOWED_VERBS, REFUSED_VERBS, refused, statement_verb
from tilelens.store.sql.readonly import Reader, RowStream, arrow_table, fetch_chunks, stopped

if TYPE_CHECKING:
    import pyarrow as pa


TRACE_TABLE = "trace_events"
MENTIONS_TRACES = re.compile(r"\btrace_events\b", re.IGNORECASE)
# DuckDB's own reading verbs, and its verbs that reach outside the database.
DUCKDB_READ_VERBS = frozenset({"FROM", "DESCRIBE", "SUMMARIZE", "PIVOT", "UNPIVOT"})
DUCKDB_REFUSED_VERBS = frozenset({"INSTALL", "FORCE", "USE", "EXPORT"})
# Table functions that read files or run SQL given as a string; external access being off refuses the file
# readers as well, this names them in the message.
DENIED_FUNCTIONS = re.compile(
    r"\b(read_\w+|\w+_scan|glob|query|query_table|sniff_csv|parquet_\w+|iceberg_\w+|delta_\w+)\s*\(",
    re.IGNORECASE,
)
LOCKED = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "lock_configuration": True,
}
POLL_S = 0.02  # how often a running statement looks at Ctrl-C and its timeout


def mentions_trace_events(sql: str) -> bool:
    return MENTIONS_TRACES.search(sql) is not None


def check_statement(sql: str) -> None:
    """Refuse anything but one reading statement (ReadOnlyError; QueryError for what is no statement)."""
    import duckdb

    verb = statement_verb(sql)
    if verb in REFUSED_VERBS or verb in DUCKDB_REFUSED_VERBS:
        raise refused(verb)
    if verb not in ALLOWED_VERBS | DUCKDB_READ_VERBS:
        raise QueryError(f"SQL error: {verb or 'no statement'} is not a query")
    denied = DENIED_FUNCTIONS.search(sql)
    if denied is not None:
        raise refused(f"function {denied.group(1).lower()}()")
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"SQL error: {' '.join(str(exc).split())}") from exc
    if len(statements) != 1:
        raise QueryError("SQL error: one statement at a time")


def stream(
    reader: Reader,
    trace_table: Callable[[str], pa.Table],
    sql: str,
    *,
    timeout: float | None = None,
    cancel: threading.Event | None = None,
) -> RowStream:
    """Run ``sql`` in DuckDB over the history's tables it names (through ``reader``) and ``trace_events``
    (every trace, ``trace_table(sha256)`` read)."""
    try:
        import duckdb
    except ImportError:
        raise UsageError("trace_events needs DuckDB: pip install 'tilelens[duckdb]'") from None
    check_statement(sql)
    con = duckdb.connect(":memory:", config=dict(LOCKED))
    watch = _Watch(con, timeout, cancel)
    try:
        for name in _named_tables(reader, sql):
            con.register(name, _history_table(reader, name))
        failed: list[BaseException] = []
        con.register("trace_lanes", _lane_reader(reader, trace_table, failed))
        # Materialized once, so a query may read trace_events twice (a self-join) from one decoding.
        try:
            con.execute(f"CREATE TABLE {TRACE_TABLE} AS SELECT * FROM trace_lanes")
        except duckdb.Error:
            if failed:  # a blob missing or damaged: its own one-line error
                raise failed[0] from None
            raise
        con.unregister("trace_lanes")
        watch.start()
        try:
            cursor = con.execute(sql)
        except duckdb.Error as exc:
            raise watch.translate(exc) from exc
    except BaseException:
        watch.done.set()
        con.close()
        raise
    columns = [d[0] for d in cursor.description or ()]

    def rows() -> Iterator[tuple[Any, ...]]:
        try:
            for chunk in fetch_chunks(cursor.fetchmany, duckdb.Error, watch.translate):
                yield from chunk
        finally:
            watch.done.set()
            con.close()

    return RowStream(columns, rows())


class _Watch:
    """Interrupts the connection's statement once ``cancel`` is set or ``timeout`` seconds have passed."""

    def __init__(self, con: Any, timeout: float | None, cancel: threading.Event | None) -> None:
        self.con, self.timeout, self.cancel = con, timeout, cancel
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.done = threading.Event()
        self.reason: str | None = None

    def start(self) -> None:
        if self.cancel is not None or self.deadline is not None:
            threading.Thread(target=self._run, name="tilelens-trace-sql-watch", daemon=True).start()

    def _run(self) -> None:
        while not self.done.wait(POLL_S):
            if self.cancel is not None and self.cancel.is_set():
                self.reason = "cancel"
            elif self.deadline is not None and time.monotonic() > self.deadline:
                self.reason = "timeout"
            else:
                continue
            self.con.interrupt()
            return

    def translate(self, exc: Exception) -> QueryError:
        if self.reason is not None:
            return stopped(self.reason, self.timeout)
        return QueryError(f"SQL error: {' '.join(str(exc).split())}")


def _named_tables(reader: Reader, sql: str) -> list[str]:
    """The history's tables and views that the query names (a word of it), other than trace_events."""
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sql)}
    from tilelens.store.read.catalog import table_names

    return [name for name in table_names(reader) if name.lower() in words and name != TRACE_TABLE]


def _history_table(reader: Reader, name: str) -> pa.Table:
    """``SELECT *`` of a table or view, through the history's read-only connection, as Arrow."""
    with reader.stream(f'SELECT * FROM "{name}"') as rows:
        return arrow_table(rows.columns, list(rows))


def _lane_reader(
    reader: Reader, trace_table: Callable[[str], pa.Table], failed: list[BaseException]
) -> pa.RecordBatchReader:
    """Every trace of the history, one row per lane (``tilelens export``'s rows), oldest launch first.

    DuckDB pulls the batches from a thread of its own, where the history's connection may not be used: the
    rows are read here, and the generator touches only blob files. Its error goes to ``failed``, for the
    caller to raise as itself rather than as DuckDB's wrapping of it.
    """
    import pyarrow as pa

    from tilelens.store.files import lanes

    traces = reader.execute(
        "SELECT id, trace_blob FROM launches WHERE trace_blob IS NOT NULL ORDER BY id"
    ).rows
    names: dict[int, dict[int, str]] = {}
    for launch_id, position, name in reader.execute("SELECT launch_id, position, name FROM launch_args").rows:
        names.setdefault(int(launch_id), {})[int(position)] = str(name)

    def batches() -> Iterator[pa.RecordBatch]:
        for launch_id, blob in traces:
            try:
                trace = trace_table(str(blob))
            except BaseException as exc:
                exc.args = (f"launch {launch_id}'s access trace: {exc}",)
                failed.append(exc)
                raise
            yield from lanes.lane_table(trace, int(launch_id), names.get(int(launch_id), {}))

    return pa.RecordBatchReader.from_batches(lanes.LANE_SCHEMA, batches())
