"""Reading a PostgreSQL history read-only: the server refuses writes, and nothing reaches outside the database.

A READ ONLY transaction alone is not a read-only gate on PostgreSQL: inside one, a superuser can still read
server files (``pg_read_file``), run programs (``COPY ... TO PROGRAM``), create large objects (``lo_import``),
change settings (``set_config``), or end the transaction (``COMMIT``) and write in the next one; and the
simple query protocol runs ``SELECT 1; DELETE ...`` as two statements. So every statement passes these gates:

1. **One statement**, sent through the extended query protocol (libpq's ``PQexecParams``): the server itself refuses
   a second command in the text.
2. **Reading verbs only**: the statement must start with SELECT, WITH, VALUES, TABLE, EXPLAIN or SHOW; a
   COPY, SET, COMMIT, DO, CALL... is refused before it is sent.
3. **Only pure reads of the history's own tables**: the statement is parsed by PostgreSQL's own parser and
   every function, operator, type, table and node type in it must be on an allowlist
   (:mod:`tilelens.store.sql.pgparse`): nothing is denied by name, so a name assembled from strings or a
   function nobody thought of (``ts_rewrite`` runs a query given as text) is refused like every unknown one.
4. **The server's own refusal**: the session starts with ``default_transaction_read_only=on``, each
   transaction is ``BEGIN READ ONLY`` and takes its snapshot at once, so it can no longer be switched to
   read-write; a superuser session also drops to the
   ``pg_read_all_data`` role (PostgreSQL 14+), which may read every table and no server file; after every
   statement the transaction is checked to still be read-only. Least privilege goes further: a URL that
   names a reader role (``tilelens db grant-reader ROLE``: SELECT on TileLens's tables and views, nothing
   else) connects as that role, which the server lets read the history and nothing more.
5. **A statement timeout** (``statement_timeout``, :data:`READ_TIMEOUT_S` by
   default), so no query holds the server for long.

Values come back as SQLite gives them, so that ``tilelens sql`` prints the same on both: JSON as its stored
text (except a bare JSON number, which SQLite's column affinity stores as a number: so here too), times as
UTC text (``YYYY-MM-DD HH:MM:SS.ffffff``), booleans as 0/1, integral numerics as ints (the conversions are in
:mod:`tilelens.store.sql.libpq`).

Only this module, :mod:`tilelens.store.sql.libpq` and :mod:`tilelens.store.sql.readonly` know this; the connection is
libpq's own, through ctypes (importing psycopg would cost a third of a read command's time), and SQLAlchemy
is never imported on this path.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tilelens.config import Location
from tilelens.errors import HistoryError, NoHistoryError, QueryError, ReadOnlyError
from tilelens.store.sql import libpq, pgparse, runstatus
from tilelens.store.sql.urls import postgres_connect_args

# The longest one statement of a reader may run when the caller sets no timeout: a shared server is not held
# by one reader (``tilelens sql --timeout`` sets another).
READ_TIMEOUT_S = 60.0

ALLOWED_VERBS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "EXPLAIN", "SHOW"})
# Every other statement PostgreSQL knows, and SQLite's writing words: refused as SQLite refuses them. A first
# word outside both is a syntax error, reported as one.
REFUSED_VERBS = frozenset(
    {
        "ABORT", "ALTER", "ANALYZE", "BEGIN", "CALL", "CHECKPOINT", "CLOSE", "CLUSTER", "COMMENT", "COMMIT",
        "COPY", "CREATE", "DEALLOCATE", "DECLARE", "DELETE", "DISCARD", "DO", "DROP", "END", "EXECUTE",
        "FETCH", "GRANT", "IMPORT", "INSERT", "LISTEN", "LOAD", "LOCK", "MERGE", "MOVE", "NOTIFY", "PREPARE",
        "REASSIGN", "REFRESH", "REINDEX", "RELEASE", "RESET", "REVOKE", "ROLLBACK", "SAVEPOINT", "SECURITY",
        "SET", "START", "TRUNCATE", "UNLISTEN", "UPDATE", "VACUUM", "REPLACE", "ATTACH", "DETACH", "PRAGMA",
    }
)  # fmt: skip

_CANNOT_EXECUTE_RE = re.compile(r"cannot execute (.+?) in a read-only transaction")
_WRITE_WORD_RE = re.compile(r"\b(?:insert|update|delete|merge)\b", re.IGNORECASE)
_LOCAL_VERB_RE = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*([A-Za-z]+)", re.DOTALL)


def statement_verb(sql: str) -> str:
    match = _LOCAL_VERB_RE.match(sql)
    return match.group(1).upper() if match else ""


def refused(what: str) -> ReadOnlyError:
    return ReadOnlyError(f"refused {what}: the history is open read-only, nothing was changed")


def check_statement(sql: str) -> None:
    """Gates 2 and 3: raise :class:`ReadOnlyError` for a statement that is not a plain read."""
    verb = statement_verb(sql)
    if not verb:
        raise QueryError("SQL error: no statement")
    if verb in REFUSED_VERBS:
        raise refused(verb)
    if verb not in ALLOWED_VERBS:
        word = _LOCAL_VERB_RE.match(sql).group(1)  # type: ignore[union-attr]  # as written, as the server says
        raise QueryError(f'SQL error: syntax error at or near "{word}"')


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def connect_reason(message: str) -> str:
    """libpq's first line without psycopg's prefix and the server's ``FATAL:``."""
    for noise in ("connection failed: ", "connection is bad: "):
        message = message.removeprefix(noise)
    return re.sub(r"\bFATAL:\s+", "", message)


def is_connect_failure(message: str) -> bool:
    return message.startswith(("connection failed: ", "connection is bad: "))


def missing_database(message: str) -> str | None:
    """The database a connection error says does not exist, or None."""
    match = re.search(r'database "([^"]*)" does not exist', message)
    return match.group(1) if match else None


def connect_failure(label: str, exc: BaseException) -> HistoryError:
    """One line for a connection that failed: server down, wrong password, no such database."""
    message = _first_line(exc)
    missing = missing_database(message)
    if missing is not None:
        return NoHistoryError(f"no TileLens history at {label} (database {missing!r} does not exist)")
    return HistoryError(f"cannot connect to history database {label}: {connect_reason(message)}")


_PARAM_RE = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def numbered_params(sql: str, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """``:name`` placeholders (what the store's queries use) as libpq's ``$1``, and the values in order."""
    order: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in order:
            order[name] = len(order) + 1
        return f"${order[name]}"

    text = _PARAM_RE.sub(number, sql)
    return text, [params[name] for name in order]


class PostgresGate:
    """A libpq connection (:mod:`tilelens.store.sql.libpq`) behind the gates above; ``stream`` runs one statement."""

    def __init__(
        self,
        location: Location,
        label: str,
        timeout_s: float,
        fetch_rows: int,
        stopped: Callable[[str, float | None], QueryError],
    ) -> None:
        """``stopped(reason, timeout)`` makes the error of a statement stopped by its timeout or a cancel."""
        try:
            libpq.load()
        except OSError as exc:
            raise HistoryError(
                f"cannot read history {label}: reading PostgreSQL needs libpq (the libpq5 package, or "
                "pip install 'tilelens[postgres]')"
            ) from exc
        self._names = 0
        self._columns: dict[str, list[str]] | None = None  # of runs and run_overview, read when first needed
        self.fetch_rows = fetch_rows
        self.stopped = stopped
        self.label = label
        self.timeout_s = timeout_s
        args = postgres_connect_args(location.db_url)
        options = (
            f"-c default_transaction_read_only=on -c statement_timeout={int(timeout_s * 1000)} "
            "-c DateStyle=ISO -c IntervalStyle=postgres -c extra_float_digits=1"
        )
        args["options"] = f"{args['options']} {options}" if args.get("options") else options
        args.setdefault("connect_timeout", "10")
        args["client_encoding"] = "UTF8"
        try:
            self.conn = libpq.Connection(args)
        except libpq.LibpqError as exc:
            raise connect_failure(label, exc) from exc
        try:
            result = self.conn.run(
                "SELECT rolsuper, to_regrole('pg_read_all_data') IS NOT NULL FROM pg_roles "
                "WHERE rolname = current_user"
            )
            roles = result.rows()
            result.clear()
            self._superuser = bool(roles) and roles[0][0] == "t"
            self._can_drop_privileges = self._superuser and roles[0][1] == "t"
            self.begin()
            self.allowed = self._relations()
        except libpq.LibpqError as exc:
            self.conn.close()
            raise connect_failure(label, exc) from exc
        except BaseException:
            self.conn.close()
            raise

    def _run(self, sql: str) -> None:
        self.conn.run(sql).clear()

    def begin(self) -> None:
        """A fresh read-only transaction (gate 4), its snapshot taken."""
        role = "SET LOCAL ROLE pg_read_all_data; " if self._can_drop_privileges else ""
        # The SELECT takes the snapshot: SET TRANSACTION READ WRITE is refused from here on.
        self._run(
            f"BEGIN TRANSACTION READ ONLY; SET LOCAL statement_timeout = {int(self.timeout_s * 1000)}; "
            f"{role}SELECT 1"
        )

    def _relations(self) -> pgparse.Allowed:
        """The tables and views a statement may read: the history's own, in its schema."""
        result = self.conn.run(
            "SELECT current_schema(), c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm')"
        )
        rows = result.rows()
        result.clear()
        schema = rows[0][0] if rows else "public"
        return pgparse.Allowed(frozenset(r[1] for r in rows), schema)

    def tables_and_revisions(self, version_table: str) -> tuple[set[str], list[str]]:
        result = self.conn.run(
            # pg_catalog, not information_schema.tables: the same names, a tenth of the time
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
        )
        tables = {r[0] for r in result.rows()}
        result.clear()
        current: list[str] = []
        if version_table in tables:
            result = self.conn.run(f"SELECT version_num FROM {version_table}")
            current = [r[0] for r in result.rows()]
            result.clear()
        return tables, current

    def stream(
        self,
        sql: str,
        params: Mapping[str, Any] | None,
        timeout: float | None,
        cancel: threading.Event | None,
    ) -> tuple[list[str], Iterator[tuple[Any, ...]]]:
        """One statement through gates 1-5; its rows as they come (a server-side cursor for queries).

        ``timeout`` replaces the backstop for this statement (PostgreSQL applies it to each statement sent:
        the cursor's declaration and each fetch); setting ``cancel`` cancels the running statement.
        """
        check_statement(sql)
        limit = self.timeout_s if timeout is None else timeout
        query, values = numbered_params(sql, params) if params else (sql, [])
        pgparse.check_read(query, self.allowed)  # gate 3
        query = self._with_lost_runs(query)
        self._names += 1
        cursor = f"tilelens_{self._names}"
        declared = statement_verb(sql) not in ("SHOW", "EXPLAIN")  # those are not cursor-able; small answers
        watcher = _CancelWatcher(self.conn, cancel)
        first: libpq.Result | None = None
        try:
            if limit != self.timeout_s:
                self._run(f"SET LOCAL statement_timeout = {max(1, int(limit * 1000))}")
            if declared:  # the extended protocol: one statement only (gate 1)
                self.conn.run_params(f"DECLARE {cursor} NO SCROLL CURSOR FOR {query}", values).clear()
                described = self.conn.describe_portal(cursor)
                description = described.columns
                described.clear()
            else:
                first = self.conn.run_params(query, values)
                description = first.columns
        except libpq.LibpqError as exc:
            watcher.stop()
            self._restart()
            raise self._translate(exc, sql, limit) from exc
        except BaseException:
            watcher.stop()
            self._restart()
            raise
        columns = [name for name, _ in description]
        convert = [libpq.converter(oid) for _, oid in description]
        fetch = f"FETCH FORWARD {self.fetch_rows} FROM {cursor}"

        def rows() -> Iterator[tuple[Any, ...]]:
            clean = False
            try:
                if first is not None:
                    chunk = first.rows(convert)
                    first.clear()
                    yield from chunk
                while declared:
                    try:
                        result = self.conn.run(fetch)
                    except libpq.LibpqError as exc:
                        raise self._translate(exc, sql, limit) from exc
                    try:
                        chunk = result.rows(convert)
                    finally:
                        result.clear()
                    if not chunk:
                        break
                    yield from chunk
                    if cancel is not None and cancel.is_set():
                        raise self.stopped("cancel", timeout)
                clean = True
            finally:
                if first is not None:
                    first.clear()
                watcher.stop()
                self._finish(cursor if declared else None, clean, limit)

        return columns, rows()

    def _with_lost_runs(self, query: str) -> str:
        """``query``, reading ``lost`` for the runs of this host whose process is gone where it names ``runs``
        or ``run_overview`` (:mod:`tilelens.store.sql.runstatus`); the rewritten text passes gate 3 again."""
        statement = pgparse.parsed(query)
        if not runstatus.names_runs(statement):
            return query
        try:
            result = self.conn.run_params(
                "SELECT * FROM runs WHERE status = 'running' AND host = $1", [socket.gethostname()]
            )
            try:
                lost = runstatus.lost_ids(result.rows(), [name for name, _ in result.columns])
            finally:
                result.clear()
            if not lost:
                return query
            if self._columns is None:
                result = self.conn.run(
                    "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                    "AND c.relname IN ('runs', 'run_overview') AND a.attnum > 0 AND NOT a.attisdropped "
                    "ORDER BY c.relname, a.attnum"
                )
                self._columns = {}
                for relation, column in result.rows():
                    self._columns.setdefault(relation, []).append(column)
                result.clear()
        except libpq.LibpqError as exc:
            self._restart()
            raise self._translate(exc, query, self.timeout_s) from exc
        rewritten = runstatus.rewrite_postgres(statement, self.allowed.schema, self._columns, lost)
        pgparse.check_read(rewritten, self.allowed)
        return rewritten

    def _finish(self, cursor: str | None, clean: bool, limit: float) -> None:
        """After a statement: close its cursor, check the transaction is still read-only, or start afresh."""
        if clean:
            try:
                if cursor is not None:
                    self._run(f"CLOSE {cursor}")
                still = self.conn.scalar("SELECT current_setting('transaction_read_only')")
                if limit != self.timeout_s:
                    self._run(f"SET LOCAL statement_timeout = {int(self.timeout_s * 1000)}")
            except libpq.LibpqError:
                still = None
            if still == "on":
                return
            self._restart()
            if still is not None:  # cannot happen past gates 1-3; never trust that it cannot
                raise refused("a statement that left the read-only transaction")
            return
        self._restart()  # stopped part way or failed: the transaction may be aborted

    def _translate(self, exc: BaseException, sql: str, limit: float) -> HistoryError:
        if isinstance(exc, libpq.LibpqError) and exc.connection:
            return connect_failure(self.label, exc)
        message = " ".join(_first_line(exc).split())
        cannot = _CANNOT_EXECUTE_RE.search(message)
        if cannot:
            what = cannot.group(1)
            if what == "SELECT":  # a data-modifying WITH: name the write it holds, not the outer SELECT
                write = _WRITE_WORD_RE.search(sql)
                what = write.group(0).upper() if write else what
            return refused(what)
        if "data-modifying statements" in message:  # a writing WITH, refused by the cursor's declaration
            write = _WRITE_WORD_RE.search(sql)
            return refused(write.group(0).upper() if write else "WITH")
        if "SELECT ... INTO is not allowed" in message:  # refused by the cursor's declaration
            return refused("SELECT INTO")
        if "read-only transaction" in message:
            return refused(f"({message})")
        if "statement timeout" in message:
            return self.stopped("timeout", limit)
        if "due to user request" in message:
            return self.stopped("cancel", None)
        if "cannot insert multiple commands" in message:
            return QueryError("SQL error: one statement at a time")
        return QueryError(f"SQL error: {message}")

    def _restart(self) -> None:
        """After a failed statement: roll the aborted transaction back and open a fresh read-only one."""
        try:
            self._run("ROLLBACK")
            self.begin()
        except libpq.LibpqError as exc:
            raise connect_failure(self.label, exc) from exc

    def close(self) -> None:
        try:
            if not self.conn.closed:
                self._run("ROLLBACK")
        except libpq.LibpqError:
            pass
        finally:
            self.conn.close()


class _CancelWatcher:
    """Cancels the connection's running statement when ``cancel`` is set (Ctrl-C in ``tilelens sql``)."""

    def __init__(self, conn: Any, cancel: threading.Event | None) -> None:
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        if cancel is not None:
            self._thread = threading.Thread(target=self._watch, args=(conn, cancel), daemon=True)
            self._thread.start()

    def _watch(self, conn: Any, cancel: threading.Event) -> None:
        while not self._done.wait(0.02):
            if cancel.is_set():
                conn.cancel()
                return

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
