"""Opening a history for reading only: nothing created, nothing migrated, writes rejected by the database.

The read commands answer in a fraction of a second, so this path avoids what ``History.open`` pays for
(Alembic's script machinery, the ORM) and, for a SQLite file, SQLAlchemy itself: the file is opened with the
standard library's ``sqlite3`` in read-only mode (``?mode=ro``), with ``PRAGMA query_only`` and an authorizer
that lets through only reads, so ``tilelens sql`` cannot change a history however its query is written. Before
those are set, the connection gets the TEMP views that read dead runs as ``lost``
(:mod:`tilelens.store.sql.runstatus`).
Other databases go through SQLAlchemy inside a read-only transaction.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tilelens.config import Location
from tilelens.errors import (
    HistoryError,
    NoHistoryError,
    NotAHistoryError,
    QueryError,
    QueryInterruptedError,
    QueryTimeoutError,
    ReadOnlyError,
    SchemaTooNewError,
)
from tilelens.store.sql import runstatus
from tilelens.store.sql.journal import has_hot_journal, hot_journal_error
from tilelens.store.sql.migrations import versions_dir

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

VERSION_TABLE = "alembic_version"
BUSY_TIMEOUT_S = 30.0
MIGRATIONS_VERSIONS = versions_dir()  # the package's own (tilelens._migrations), wherever it is installed


@dataclass(frozen=True)
class Result:
    """A query's columns and all its rows, as the driver returned them."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    def to_arrow(self) -> pa.Table:
        """The rows as a ``pyarrow.Table``: types inferred per column; a column of mixed kinds is text."""
        return arrow_table(self.columns, self.rows)

    def to_pandas(self) -> pd.DataFrame:
        """The rows as a ``pandas.DataFrame`` (pandas is imported here, and needed only here)."""
        return self.to_arrow().to_pandas()


def arrow_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> pa.Table:
    import pyarrow as pa

    def column(values: list[Any]) -> pa.Array:
        try:
            return pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # SQLite lets a column mix kinds
            return pa.array([None if v is None else str(v) for v in values], pa.string())

    values = list(zip(*rows)) if rows else [() for _ in columns]
    return pa.Table.from_arrays([column(list(v)) for v in values], names=list(columns))


class RowStream:
    """A query's columns and its rows as they come, in constant memory; close it (or use ``with``).

    Iterating raises :class:`QueryInterruptedError` or :class:`QueryTimeoutError` when the query is stopped
    part way; rows already yielded stay valid.
    """

    def __init__(self, columns: list[str], rows: Iterator[tuple[Any, ...]]) -> None:
        self.columns = columns
        self._rows = rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return self._rows

    def close(self) -> None:
        close = getattr(self._rows, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> RowStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# SQLite's integers (and PostgreSQL's bigint) are 64-bit: a larger id names no row, and a driver given one as a
# parameter raises OverflowError instead of finding nothing.
SQL_INT_MAX = 2**63 - 1


def storable_id(value: int) -> bool:
    """Whether ``value`` can be an id in the database at all; callers treat any other as not found."""
    return -SQL_INT_MAX - 1 <= value <= SQL_INT_MAX


def row_limit(value: int) -> int:
    """A LIMIT the driver accepts: beyond 64 bits every row is wanted anyway."""
    return min(int(value), SQL_INT_MAX)


FETCH_ROWS = 512  # rows fetched from the driver at a time while streaming
PROGRESS_STEPS = 10_000  # SQLite virtual-machine steps between two looks at the cancel flag and the clock


def fetch_chunks(
    fetchmany: Callable[[int], Sequence[Any]],
    errors: type[Exception] | tuple[type[Exception], ...],
    translate: Callable[[Exception], BaseException],
) -> Iterator[Sequence[Any]]:
    """A cursor's rows in chunks of :data:`FETCH_ROWS` until none are left; a driver error while fetching is
    raised as what ``translate`` makes of it (the readers' one fetch loop)."""
    while True:
        try:
            chunk = fetchmany(FETCH_ROWS)
        except errors as exc:
            raise translate(exc) from exc
        if not chunk:
            return
        yield chunk


def stopped(reason: str, timeout: float | None) -> QueryError:
    if reason == "timeout":
        return QueryTimeoutError(f"query stopped: it ran past its {timeout:g} s timeout")
    return QueryInterruptedError("query interrupted")


# -- known schema revisions ---------------------------------------------------------------------------------

_REVISION_RE = re.compile(r"^revision\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOWN_RE = re.compile(r"^down_revision\s*(?::[^=\n]*)?=\s*(.+)$", re.MULTILINE)


@lru_cache(maxsize=4)
def known_revisions(versions_dir: Path = MIGRATIONS_VERSIONS) -> tuple[frozenset[str], tuple[str, ...]]:
    """Revisions this code ships and its heads, read from the migration files without importing Alembic.

    Importing Alembic's script machinery costs more than the whole answer of ``tilelens ls``; the two
    assignments it would read are plain literals at the top of each migration.
    """
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in sorted(versions_dir.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        match = _REVISION_RE.search(text)
        if match is None:
            continue
        revisions.add(match.group(1))
        down = _DOWN_RE.search(text)
        if down is not None:
            parents.update(re.findall(r"['\"]([^'\"]+)['\"]", down.group(1)))
    return frozenset(revisions), tuple(sorted(revisions - parents))


def check_schema(label: str, tables: set[str], current: Sequence[str]) -> None:
    """Refuse what is not a history, or a history newer than this code; an older one is readable."""
    if VERSION_TABLE not in tables:
        if tables:
            raise NotAHistoryError(f"{label} is a database of another program, not a TileLens history")
        raise NoHistoryError(f"no TileLens history at {label} (the database is empty)")
    if not current:
        raise NoHistoryError(f"no TileLens history at {label} (its schema was never created)")
    known, heads = known_revisions()
    unknown = [rev for rev in current if rev not in known]
    if known and unknown:
        raise SchemaTooNewError(label, unknown, ", ".join(heads))


# -- opening a SQLite file without writing ---------------------------------------------------------------


def connect_read_only(path: Path, label: str | None = None) -> sqlite3.Connection:
    """``path`` opened so that neither it nor anything beside it can be created or changed by this connection.

    ``?mode=ro`` first: SQLite's normal locking, so a reader sees a consistent snapshot while others write.
    A WAL history needs its ``-shm`` index, which a read-only connection may create but not on a read-only
    mount or in a folder it cannot write; then SQLite says "unable to open database file" and the file is
    opened again with ``immutable=1``, which skips locking and change detection altogether. That is the
    trade-off: immutable is right for media nobody writes (a read-only mount, an archived copy) and would
    return inconsistent rows if another process were writing the file meanwhile, which on such media it
    cannot. An immutable open ignores a ``-wal`` file, so when one with content lies beside the database
    (commits not yet copied into it) the history is refused instead of shown without them.

    The caller checks the file exists first: ``mode=ro`` never creates one. ``uri=True`` with a quoted path
    keeps ``?`` and ``#`` in file names from being read as URI syntax.
    """
    label = label or str(path)
    quoted = urllib.parse.quote(str(path))
    try:
        conn = sqlite3.connect(
            f"file:{quoted}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
        )
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.DatabaseError as exc:
            conn.close()
            if "not a database" in str(exc):
                raise NotAHistoryError(f"{label} is not a database ({exc})") from exc
            if "unable to open" not in str(exc):
                raise
        wal = Path(f"{path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise HistoryError(
                f"cannot read history {label}: it is in a folder this process cannot write, and its "
                f"write-ahead log {wal.name} holds commits SQLite can only read by writing an index beside it; "
                "copy the folder to writable storage to read it"
            )
        return sqlite3.connect(
            f"file:{quoted}?mode=ro&immutable=1", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
        )
    except NotAHistoryError:
        if has_hot_journal(path):
            raise hot_journal_error(path, label) from None
        raise
    except sqlite3.Error as exc:
        if "readonly" in str(exc) and has_hot_journal(path):
            raise hot_journal_error(path, label) from exc
        raise HistoryError(f"cannot open history {label} for reading: {exc}") from exc


# -- readers ------------------------------------------------------------------------------------------------


class Reader:
    """A read-only connection to one history: ``execute`` runs one statement and returns all its rows."""

    location: Location
    label: str
    dialect: str
    revisions: tuple[str, ...] = ()  # the schema revisions stamped in the history

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> Result:
        """Run one statement and return all its rows (``stream``, collected)."""
        with self.stream(sql, params) as rows:
            return Result(rows.columns, list(rows))

    def stream(
        self,
        sql: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
    ) -> RowStream:
        """Run one statement and hand its rows out as they come.

        ``timeout`` (seconds) stops the statement once it has run that long; setting ``cancel`` (from a
        signal handler, another thread) stops it within a moment. Either way nothing is changed, and the
        iteration raises the matching ``QueryError``.
        """
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_reader(location: Location) -> Reader:
    """Open the history at ``location`` for reading; raise :class:`NoHistoryError` when there is none."""
    path = location.sqlite_path
    if path is not None:
        return SQLiteReader(location, path)
    from tilelens.store.sql.urls import is_postgres

    if is_postgres(location.db_url):
        return PostgresReader(location)
    return EngineReader(location)


# SQLite's authorizer sees every table, column, function and pragma a statement touches, before it runs.
_ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE}
# Pragmas that only report; any pragma given a value is refused, since the value form is the one that writes.
_REPORTING_PRAGMAS = {
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "collation_list",
    "function_list",
    "pragma_list",
    "database_list",
    "compile_options",
    "user_version",
    "schema_version",
    "data_version",
    "application_id",
    "page_count",
    "page_size",
    "freelist_count",
    "journal_mode",
    "encoding",
    # checks that only read: they answer "ok" or list what is wrong
    "integrity_check",
    "quick_check",
    "foreign_key_check",
}
_TABLE_ARGUMENT_PRAGMAS = {"table_info", "table_xinfo", "table_list", "index_list", "index_info"}
_TABLE_ARGUMENT_PRAGMAS |= {"index_xinfo", "foreign_key_list", "integrity_check", "quick_check"}
_TABLE_ARGUMENT_PRAGMAS |= {"foreign_key_check"}
_DENIED_FUNCTIONS = {"load_extension"}


_ACTION_NAMES = {
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ")
    for name in (
        "INSERT",
        "UPDATE",
        "DELETE",
        "CREATE_TABLE",
        "CREATE_INDEX",
        "CREATE_VIEW",
        "CREATE_TRIGGER",
        "CREATE_TEMP_TABLE",
        "CREATE_TEMP_INDEX",
        "CREATE_TEMP_VIEW",
        "CREATE_TEMP_TRIGGER",
        "CREATE_VTABLE",
        "DROP_TABLE",
        "DROP_INDEX",
        "DROP_VIEW",
        "DROP_TRIGGER",
        "DROP_TEMP_TABLE",
        "DROP_TEMP_INDEX",
        "DROP_TEMP_VIEW",
        "DROP_TEMP_TRIGGER",
        "DROP_VTABLE",
        "ALTER_TABLE",
        "ATTACH",
        "DETACH",
        "TRANSACTION",
        "SAVEPOINT",
        "ANALYZE",
        "REINDEX",
    )
}


_READ_ONLY_MESSAGES = ("not authorized", "readonly", "read-only", "may not be modified")
_LEADING_NOISE = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*", re.DOTALL)


def statement_verb(sql: str) -> str:
    """The statement's first keyword (``DELETE``, ``DROP``...), past comments and parentheses."""
    match = re.match(r"[A-Za-z]+", _LEADING_NOISE.sub("", sql, count=1))
    return match.group(0).upper() if match else ""


class SQLiteReader(Reader):
    dialect = "sqlite"

    def __init__(self, location: Location, path: Path) -> None:
        self.location = location
        self.label = str(path)
        self.denied: str | None = None
        if not path.exists():
            raise NoHistoryError(location.no_history_message())
        if path.is_dir():
            raise NotAHistoryError(f"{path} is a directory, not a TileLens history")
        self.conn = connect_read_only(path, self.label)
        try:
            tables = {r[0] for r in self._fetch("SELECT name FROM sqlite_master WHERE type = 'table'")}
            current = (
                [r[0] for r in self._fetch(f"SELECT version_num FROM {VERSION_TABLE}")]
                if VERSION_TABLE in tables
                else []
            )
            check_schema(self.label, tables, current)
            self.revisions = tuple(current)
            runstatus.shadow_sqlite(self.conn)  # before query_only and the authorizer: temp views, no write
            self.conn.execute("PRAGMA query_only = ON")
            if hasattr(self.conn, "setlimit"):  # Python 3.11+: no attached databases at all
                self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)  # type: ignore[attr-defined,unused-ignore]  # 3.11+
            self.conn.set_authorizer(self._authorize)
        except BaseException:
            self.conn.close()
            raise

    def _fetch(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            return self.conn.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            message = str(exc)
            if "not a database" in message:
                raise NotAHistoryError(f"{self.label} is not a database ({message})") from exc
            raise HistoryError(f"cannot read history {self.label}: {message}") from exc

    def _authorize(
        self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
    ) -> int:
        if action in _ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
            # Reported while SQLite sets up a table-valued pragma (``pragma_table_info('runs')``); a real
            # update of the schema table is still refused by the read-only connection itself.
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() not in _DENIED_FUNCTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in _REPORTING_PRAGMAS and (arg2 is None or name in _TABLE_ARGUMENT_PRAGMAS):
                return sqlite3.SQLITE_OK
            what = f"PRAGMA {arg1}" + (f" = {arg2}" if arg2 is not None else "")
        elif action == sqlite3.SQLITE_FUNCTION:
            what = f"function {arg2}()"
        else:
            what = _ACTION_NAMES.get(action, f"operation {action}")
            if arg1 and action not in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
                what += f" {arg1}"
        if self.denied is None:  # the first refusal is the one the statement failed on
            self.denied = what
        return sqlite3.SQLITE_DENY

    def stream(
        self,
        sql: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
    ) -> RowStream:
        # SQLite calls the progress handler every PROGRESS_STEPS steps of a running statement, however long
        # a single step of the caller's (a recursive CTE, a huge sort) lasts: returning 1 makes the statement
        # fail with "interrupted". Being Python code, the handler also gives a SIGINT handler its turn.
        deadline = None if timeout is None else time.monotonic() + timeout
        stop: list[str] = []

        def progress() -> int:
            if cancel is not None and cancel.is_set():
                stop.append("cancel")
                return 1
            if deadline is not None and time.monotonic() > deadline:
                stop.append("timeout")
                return 1
            return 0

        def translate(exc: Exception) -> HistoryError:
            if stop and "interrupted" in str(exc):
                return stopped(stop[0], timeout)
            return self._translate(exc, sql)

        errors = (sqlite3.DatabaseError, sqlite3.Warning, sqlite3.ProgrammingError)
        self.denied = None
        self.conn.set_progress_handler(progress, PROGRESS_STEPS)
        try:
            cursor = self.conn.execute(sql, dict(params or {}))
        except errors as exc:
            self.conn.set_progress_handler(None, 0)
            raise translate(exc) from exc
        except BaseException:
            self.conn.set_progress_handler(None, 0)
            raise
        columns = [d[0] for d in cursor.description or ()]

        def rows() -> Iterator[tuple[Any, ...]]:
            try:
                for chunk in fetch_chunks(cursor.fetchmany, errors, translate):
                    yield from chunk
                    if cancel is not None and cancel.is_set():
                        raise stopped("cancel", timeout)
            finally:
                cursor.close()
                self.conn.set_progress_handler(None, 0)

        return RowStream(columns, rows())

    def _translate(self, exc: Exception, sql: str) -> HistoryError:
        message = " ".join(str(exc).split())
        self.denied = self.denied or runstatus.view_write(message, sql)  # SQLite refused it before asking
        if self.denied is not None or any(s in message for s in _READ_ONLY_MESSAGES):
            verb = statement_verb(sql)
            what = verb if verb not in ("SELECT", "WITH", "VALUES", "PRAGMA", "") else self.denied or message
            return ReadOnlyError(f"refused {what}: the history is open read-only, nothing was changed")
        if "one statement at a time" in message:
            return QueryError("SQL error: one statement at a time")
        return QueryError(f"SQL error: {message}")

    def close(self) -> None:
        self.conn.close()


class PostgresReader(Reader):
    """A PostgreSQL history through psycopg (no SQLAlchemy), behind the gates of :mod:`tilelens.store.sql.pgreader`."""

    dialect = "postgresql"

    def __init__(self, location: Location) -> None:
        from tilelens.store.sql.pgreader import READ_TIMEOUT_S, PostgresGate

        self.location = location
        self.label = location.display_url()
        self.gate = PostgresGate(location, self.label, READ_TIMEOUT_S, FETCH_ROWS, stopped)
        try:
            tables, current = self.gate.tables_and_revisions(VERSION_TABLE)
            check_schema(self.label, tables, current)
            self.revisions = tuple(current)
        except BaseException:
            self.gate.close()
            raise

    def stream(
        self,
        sql: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
    ) -> RowStream:
        columns, rows = self.gate.stream(sql, params, timeout, cancel)
        return RowStream(columns, rows)

    def close(self) -> None:
        self.gate.close()


class EngineReader(Reader):
    """Any other database, through SQLAlchemy (imported only here) in a read-only transaction."""

    def __init__(self, location: Location) -> None:
        from sqlalchemy import create_engine, inspect, text
        from sqlalchemy.exc import DBAPIError, SQLAlchemyError

        self._text = text
        self._errors = (DBAPIError, SQLAlchemyError)
        self.location = location
        self.label = location.display_url()
        try:
            self.engine = create_engine(location.db_url)
            self.dialect = self.engine.dialect.name
            self.conn = self.engine.connect()
        except ImportError as exc:
            raise HistoryError(f"cannot use database {self.label}: {exc} (is its driver installed?)") from exc
        except SQLAlchemyError as exc:
            raise NoHistoryError(f"no TileLens history at {self.label} ({_first_line(exc)})") from exc
        try:
            tables = set(inspect(self.conn).get_table_names())
            current: list[str] = []
            if VERSION_TABLE in tables:
                current = [r[0] for r in self.conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))]
            self.conn.rollback()
            check_schema(self.label, tables, current)
            self.revisions = tuple(current)
            begin_read_only(self.conn)
        except BaseException:
            self.close()
            raise

    def stream(
        self,
        sql: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
    ) -> RowStream:
        # The server enforces the timeout (PostgreSQL: statement_timeout, for this read-only transaction);
        # ``cancel`` is looked at between fetched rows. Rows come through a server-side cursor.
        try:
            if timeout is not None and self.dialect == "postgresql":
                self.conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(timeout * 1000))}")
            conn = self.conn.execution_options(stream_results=True)
            # Without parameters the text goes to the driver as is: a ':' in a PostgreSQL cast stays a cast.
            result = conn.execute(self._text(sql), dict(params)) if params else conn.exec_driver_sql(sql)
            columns = list(result.keys()) if result.returns_rows else []
        except self._errors as exc:
            raise self._translate(exc, timeout) from exc

        def rows() -> Iterator[tuple[Any, ...]]:
            try:
                if not result.returns_rows:
                    return
                for chunk in fetch_chunks(
                    result.fetchmany, self._errors, lambda e: self._translate(e, timeout)
                ):
                    yield from (tuple(r) for r in chunk)
                    if cancel is not None and cancel.is_set():
                        raise stopped("cancel", timeout)
            finally:
                result.close()

        return RowStream(columns, rows())

    def _translate(self, exc: Exception, timeout: float | None) -> HistoryError:
        message = _first_line(exc)
        if any(s in message for s in (*_READ_ONLY_MESSAGES, "read only")):
            return ReadOnlyError(f"refused ({message}): the history is open read-only, nothing was changed")
        if timeout is not None and "statement timeout" in message:
            return stopped("timeout", timeout)
        return QueryError(f"SQL error: {message}")

    def close(self) -> None:
        try:
            self.conn.rollback()  # a read-only transaction has nothing to keep
            self.conn.close()
        finally:
            self.engine.dispose()


def begin_read_only(conn: Any) -> None:
    """Start a transaction in which the server itself refuses writes.

    PostgreSQL: ``SET TRANSACTION READ ONLY`` as the first statement of the transaction; SQLite reached
    through a URL (``file:`` URIs, memory databases): ``PRAGMA query_only``. Other servers are refused
    rather than trusted to a client-side check.
    """
    dialect = conn.dialect.name
    if dialect == "postgresql":
        conn.begin()
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")
    elif dialect == "sqlite":
        conn.exec_driver_sql("PRAGMA query_only = ON")  # per connection, outlives the transaction
        conn.commit()
    else:
        raise HistoryError(f"reading a {dialect} history read-only is not supported (SQLite or PostgreSQL)")


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return text[0] if text else type(orig).__name__
