"""SQL across the access traces of many launches: the ``trace_events`` table of ``tilelens sql``.

A query that mentions ``trace_events`` runs in an in-memory DuckDB (the ``duckdb`` extra), not in the history's
database, which cannot read Parquet blobs. What it sees:

- ``trace_events``: one row per lane of the traced launches, the columns ``tilelens export`` writes
  (``launch_id, pid_x, pid_y, pid_z, event, op, arg, arg_name, line, lane, offset, active, oob``) and the
  launch's ``kernel`` and ``run_id``. DuckDB reads the trace blobs' Parquet itself, each distinct trace once,
  and only those of the launches the statement's filters on ``launch_id``, ``kernel``, ``kernel_id`` and
  ``run_id`` keep (:mod:`~tilelens.store.read.tracepush`, :mod:`~tilelens.store.read.tracelanes`);
- every history table or view the query names (``launches``, ``launch_overview``, ...), read through the
  history's own read-only connection (:class:`~tilelens.store.sql.readonly.Reader`) and handed over as Arrow.

Read-only by construction: the DuckDB database lives in memory and holds copies. The statement passes the same
kind of gate as on PostgreSQL first (one statement, reading verbs only, functions that read files refused by
name), so a refusal is one clear line. Its filters are evaluated on a second in-memory database that never
has file access; the main one reads the verified trace files, running no user text, and then turns external
access off (no file, no network, no extension can be read or written: ``read_csv``, ``COPY``, ``ATTACH``,
``INSTALL`` fail) and locks its configuration before the statement is even parsed. Other queries never come
here.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilelens.errors import QueryError, UsageError
from tilelens.store.read import tracelanes, tracepush
from tilelens.store.sql.pgreader import ALLOWED_VERBS, REFUSED_VERBS, refused, statement_verb
from tilelens.store.sql.readonly import Reader, RowStream, arrow_table, fetch_chunks, stopped

if TYPE_CHECKING:
    import pyarrow as pa


TRACE_TABLE = tracepush.TRACE_TABLE
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
FEW_LAUNCHES = 500  # argument names are read for these launches alone, by id, up to this many


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
    trace_file: Callable[[str], Path],
    sql: str,
    *,
    timeout: float | None = None,
    cancel: threading.Event | None = None,
) -> RowStream:
    """Run ``sql`` in DuckDB over the history's tables it names (through ``reader``) and ``trace_events``.

    ``trace_file(sha256)`` is a trace blob's file, its content hash verified. Only the traces of the launches
    the statement's own filters select (:mod:`tilelens.store.read.tracepush`) are read, each once, by DuckDB
    from their Parquet (:mod:`tilelens.store.read.tracelanes`); reading them is the one step that runs with
    DuckDB's file access on, and it runs no user text. Access is off and locked before the statement runs.
    """
    try:
        import duckdb
    except ImportError:
        raise UsageError("trace_events needs DuckDB: pip install 'tilelens[duckdb]'") from None
    check_statement(sql)
    launches = _selected(_launch_map(reader), sql, timeout, cancel)
    blob_ids: dict[str, int] = {}
    files: list[Path] = []
    for launch_id, _, _, _, blob in launches:
        if blob not in blob_ids:
            try:
                files.append(trace_file(blob))
            except BaseException as exc:  # missing or damaged: its own one-line error, naming the launch
                exc.args = (f"launch {launch_id}'s access trace: {exc}",)
                raise
            blob_ids[blob] = len(blob_ids)
    con = duckdb.connect(":memory:", config={k: v for k, v in LOCKED.items() if k.startswith("auto")})
    watch = _Watch(con, timeout, cancel)
    try:
        watch.start()
        try:
            width = tracelanes.load(con, files)
            for name, value in LOCKED.items():  # lock_configuration last
                con.execute(f"SET {name} = {str(value).lower()}")
            names_of, names = _arg_names(reader, [row[0] for row in launches])
            con.register("tl_launches", _launch_table(launches, blob_ids, names_of))
            con.register("tl_arg_names", names)
            for name in _named_tables(reader, sql):
                con.register(name, _history_table(reader, name))
            tracelanes.create_views(con, width)
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


LaunchRow = tuple[int, str, int, int, str]  # launch_id, kernel, kernel_id, run_id, trace_blob


def _launch_map(reader: Reader) -> list[LaunchRow]:
    """Every traced launch with what trace_events says of it, oldest first."""
    rows = reader.execute(
        "SELECT l.id, k.module || '.' || k.qualname, l.kernel_id, l.run_id, l.trace_blob "
        "FROM launches l JOIN kernels k ON k.id = l.kernel_id WHERE l.trace_blob IS NOT NULL ORDER BY l.id"
    ).rows
    return [(int(a), str(b), int(c), int(d), str(e)) for a, b, c, d, e in rows]


def _launch_table(
    launches: list[LaunchRow], blob_ids: dict[str, int] | None = None, names_of: dict[int, int] | None = None
) -> pa.Table:
    """``tl_launches``: a launch, its kernel and run, its trace (``blob_id``; -1 before the traces are chosen)
    and the set of argument names it shares with others (``names_id``, -1 for none). Arrays from buffers (arrowbuild): ``pyarrow.array`` on
    lists imports pandas (2 s)."""
    import pyarrow as pa

    from tilelens.store.files.arrowbuild import numbers, strings

    return pa.Table.from_arrays(
        [
            numbers([r[0] for r in launches], pa.int64()),
            strings([r[1] for r in launches]),
            numbers([r[2] for r in launches], pa.int64()),
            numbers([r[3] for r in launches], pa.int64()),
            numbers([-1 if blob_ids is None else blob_ids[r[4]] for r in launches], pa.int64()),
            numbers([(names_of or {}).get(r[0], -1) for r in launches], pa.int64()),
        ],
        names=["launch_id", "kernel", "kernel_id", "run_id", "blob_id", "names_id"],
    )


def _selected(
    launches: list[LaunchRow], sql: str, timeout: float | None, cancel: threading.Event | None
) -> list[LaunchRow]:
    """The launches ``sql``'s filters on launch, kernel and run keep, evaluated over the launch map on a
    connection that can reach no file; all of them when nothing can be pushed (or the filter fails here:
    the statement itself then says why)."""
    import duckdb

    con = duckdb.connect(":memory:", config=dict(LOCKED))
    watch = _Watch(con, timeout, cancel)
    try:
        pushed = tracepush.launch_filter(con, sql)
        if pushed is None:
            return launches
        con.register("tl_launch_map", _launch_table(launches))
        alias = pushed.alias.replace('"', '""')
        watch.start()
        try:
            kept = {
                row[0]
                for row in con.execute(
                    f'SELECT launch_id FROM tl_launch_map AS "{alias}" WHERE {pushed.sql}'
                ).fetchall()
            }
        except duckdb.Error as exc:
            if watch.reason is not None:
                raise watch.translate(exc) from exc
            return launches
        return [row for row in launches if row[0] in kept]
    finally:
        watch.done.set()
        con.close()


def _arg_names(reader: Reader, launch_ids: list[int]) -> tuple[dict[int, int], pa.Table]:
    """Each launch's set of argument names (``names_id``), and the sets as (names_id, position, name) rows.

    Launches of one kernel share one set, so the names join a trace's lanes once per (trace, set), before
    the lanes fan out to the launches that share them: joined per launch, they cost as much again as the
    rest of a whole-history query. Read for the few launches asked, else for all."""
    import pyarrow as pa

    from tilelens.store.files.arrowbuild import numbers, strings

    query = "SELECT launch_id, position, name FROM launch_args"
    if len(launch_ids) <= FEW_LAUNCHES:
        query += f" WHERE launch_id IN ({', '.join(str(int(i)) for i in launch_ids) or 'NULL'})"
    per_launch: dict[int, list[tuple[int, str]]] = {}
    for launch_id, position, name in reader.execute(query).rows:
        per_launch.setdefault(int(launch_id), []).append((int(position), str(name)))
    sets: dict[tuple[tuple[int, str], ...], int] = {}
    names_of = {
        launch: sets.setdefault(tuple(sorted(pairs)), len(sets)) for launch, pairs in per_launch.items()
    }
    rows = [(names_id, position, name) for pairs, names_id in sets.items() for position, name in pairs]
    return names_of, pa.Table.from_arrays(
        [
            numbers([r[0] for r in rows], pa.int64()),
            numbers([r[1] for r in rows], pa.int64()),
            strings([r[2] for r in rows]),
        ],
        names=["names_id", "position", "name"],
    )


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
        # Interrupting again at every look until the caller is done: an interrupt that lands between two
        # statements (the traces read, the views made, the query not yet started) interrupts nothing.
        while not self.done.wait(POLL_S):
            if self.reason is None and self.cancel is not None and self.cancel.is_set():
                self.reason = "cancel"
            elif self.reason is None and self.deadline is not None and time.monotonic() > self.deadline:
                self.reason = "timeout"
            if self.reason is not None:
                self.con.interrupt()

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
