"""Engines, SQLite settings, schema migration on open, and every piece of dialect-specific SQL.

Keeping dialect knowledge here lets the rest of the store speak plain SQLAlchemy, so adding PostgreSQL means
touching this module only.

SQLite is used by several recording processes at once, which shapes three choices:

* WAL journal (readers never block the writer), a 30 s busy timeout (writers queue instead of failing),
  foreign keys on (SQLite ignores them otherwise), ``synchronous=NORMAL`` (durable against process crashes;
  a power cut may lose the last commits but never corrupts or leaves a row without its blob, because blobs
  are fsync'd before their rows are written).
* Write transactions start with ``BEGIN IMMEDIATE``: a deferred transaction that reads and then writes can
  fail at once with "database is locked" when another process committed in between, and the busy timeout
  cannot help it. Read sessions stay deferred, so readers never queue behind writers.
* pysqlite's own implicit transaction handling is switched off (``isolation_level = None``) so that the BEGIN
  we emit is the one that runs, and DDL in migrations is transactional.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, Table, create_engine, event, func, inspect, select, table
from sqlalchemy import exc as sa_exc
from sqlalchemy import text as sa_text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from tilelens.errors import (
    HistoryError,
    NoHistoryError,
    NotAHistoryError,
    SchemaStampError,
    SchemaTooNewError,
)
from tilelens.store.sql.journal import has_hot_journal, hot_journal_error
from tilelens.store.sql.migrations import migrations_dir

BUSY_TIMEOUT_S = 30.0
MIGRATIONS_DIR = migrations_dir()  # inside the package: tilelens._migrations
_BEGIN_OPTION = "tilelens_begin"
# PostgreSQL advisory lock key held while a history's schema is created or upgraded (any constant both
# openers agree on; "TLSCHEMA" in ASCII): two recorders opening one fresh database would otherwise both
# create the tables, and the second fail.
_MIGRATION_LOCK = 0x544C534348454D41
# Execution option: {BEGIN_OPTION: "IMMEDIATE"} makes a SQLite connection's BEGIN take the write lock at once.
BEGIN_OPTION = _BEGIN_OPTION
VERSION_TABLE = "alembic_version"


# -- engines ---------------------------------------------------------------------------------------------


def _sqlite_on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    try:
        # busy_timeout first: the journal-mode switch below may have to wait for another process.
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA synchronous = NORMAL")
        mode = cur.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() != "wal" and _sqlite_is_ours_or_empty(cur):
            _set_wal(cur)
    finally:
        cur.close()


def _sqlite_is_ours_or_empty(cur: sqlite3.Cursor) -> bool:
    """Only switch files we own to WAL: a foreign database is refused later and must stay as it was."""
    names = {row[0] for row in cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return not names or VERSION_TABLE in names


def _set_wal(cur: sqlite3.Cursor) -> None:
    # The switch needs a moment of exclusive access; with several processes creating one history at once
    # it can report "locked" without consulting the busy handler, so retry briefly.
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _sqlite_on_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


def create_history_engine(db_url: str) -> Engine:
    url = make_url(db_url)
    try:
        if url.get_backend_name() == "sqlite":
            engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})
            event.listen(engine, "connect", _sqlite_on_connect)
            event.listen(engine, "begin", _sqlite_on_begin)
            return engine
        return create_engine(url, pool_pre_ping=True)
    except (ImportError, sa_exc.ArgumentError, sa_exc.NoSuchModuleError) as exc:
        shown = url.render_as_string(hide_password=True)
        raise HistoryError(f"cannot use database {shown}: {exc} (is its driver installed?)") from exc


def _sqlite_on_connect_read_only(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
    # No journal-mode switch, no synchronous setting: nothing that could write the file's header.
    dbapi_conn.isolation_level = None
    dbapi_conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    dbapi_conn.execute("PRAGMA query_only = ON")


def create_read_only_engine(db_url: str, sqlite_path: Path | None) -> Engine:
    """An engine for looking only: it creates no file and changes no byte of one (``db current``, replays
    that store nothing).

    A SQLite file is opened by :func:`tilelens.store.sql.readonly.connect_read_only` (``mode=ro``, immutable on
    read-only media) and the connection set ``query_only``; the caller makes sure the file exists. Other
    SQLite URLs get ``query_only``; a server gets a plain engine, since reading there creates nothing.
    """
    url = make_url(db_url)
    if url.get_backend_name() != "sqlite":
        return create_history_engine(db_url)
    if sqlite_path is not None:
        from tilelens.store.sql.readonly import connect_read_only

        # The URL only names the file (in messages); the creator is what connects.
        engine = create_engine(
            url.set(database=str(sqlite_path)), creator=lambda: connect_read_only(sqlite_path)
        )
    else:
        engine = create_engine(url)
    event.listen(engine, "connect", _sqlite_on_connect_read_only)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


SQLITE_HEADER = b"SQLite format 3\x00"


def check_sqlite_file(path: Path, label: str) -> None:
    """Refuse a non-empty file that is not SQLite before SQLite sees it.

    SQLite treats a file shorter than its header as an empty database and would write a new schema over it,
    so a short text file given as ``--db`` would be silently destroyed.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise HistoryError(f"cannot use history database {label}: it is a directory") from None
    except OSError as exc:
        raise HistoryError(f"cannot read history database {label}: {exc.strerror}") from exc
    if head and head != SQLITE_HEADER:
        if has_hot_journal(path):  # a history killed while being created: its first page was never written
            raise hot_journal_error(path, label)
        raise NotAHistoryError(f"{label} is not a database (no SQLite header)")


def is_sqlite(engine: Engine | Connection) -> bool:
    return engine.dialect.name == "sqlite"


@contextlib.contextmanager
def write_session(engine: Engine) -> Iterator[Session]:
    """One short write transaction; commits on success, rolls back on any error.

    An operational failure of the database (locked past the busy timeout, read-only, out of space) comes out
    as a ``HistoryError`` naming the history; a refused row (a constraint) stays the driver's error: a bug.
    """
    bind = engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"}) if is_sqlite(engine) else engine
    try:
        with Session(bind, expire_on_commit=False) as session, session.begin():
            yield session
    except sa_exc.OperationalError as exc:
        raise write_failure(engine, exc) from exc


def write_failure(engine: Engine, exc: Exception) -> HistoryError:
    """The one line an operational failure of a write becomes (locked, read-only, out of space)."""
    url = engine.url
    label = url.database if is_sqlite(engine) else url.render_as_string(hide_password=True)
    return HistoryError(f"cannot write history database {label}: {_first_line(exc)}")


# -- dialect-specific statements -------------------------------------------------------------------------


def hold_blob_rows(session: Session) -> None:
    """PostgreSQL: mark this write transaction as one that names blob rows, before it reads any.

    ``gc`` deletes unreferenced blob rows under ``LOCK TABLE blobs IN SHARE MODE``, which waits for every
    transaction holding this (ROW EXCLUSIVE, what an INSERT takes; writers do not wait on each other) and
    holds off new ones: a blob row a writer found cannot go before it commits. SQLite's write lock does
    the same by itself.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(sa_text("LOCK TABLE blobs IN ROW EXCLUSIVE MODE"))


def insert_ignore(
    session: Session, table: Table, rows: Sequence[dict[str, Any]], keys: Sequence[str]
) -> None:
    """Insert rows, skipping those whose ``keys`` already exist (blobs, kernels are shared by many rows)."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    if dialect in ("sqlite", "postgresql"):
        if dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert
        else:
            # The same on_conflict_do_nothing API under a second (dialect-specific) return type.
            from sqlalchemy.dialects.postgresql import insert  # type: ignore[assignment]
        session.execute(insert(table).on_conflict_do_nothing(index_elements=list(keys)), list(rows))
        return
    if dialect in ("mysql", "mariadb"):
        session.execute(table.insert().prefix_with("IGNORE"), list(rows))
        return
    # Portable fallback: fine under the single-writer lock a write transaction holds on most engines.
    for row in rows:
        where = [table.c[k] == row[k] for k in keys]
        if session.execute(select(func.count()).select_from(table).where(*where)).scalar_one() == 0:
            session.execute(table.insert(), [row])


def violates_unique(exc: sa_exc.IntegrityError, table: str, columns: Sequence[str]) -> bool:
    """Whether ``exc`` is a unique violation on exactly ``table(columns)`` (SQLite's or PostgreSQL's words)."""
    message = str(exc.orig)
    sqlite = "UNIQUE constraint failed: " + ", ".join(f"{table}.{c}" for c in columns)
    named = f'"uq_{table}_{"_".join(columns)}"'  # the naming convention's name, as PostgreSQL quotes it
    return message.strip() == sqlite or ("duplicate key" in message and named in message)


# -- schema ----------------------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _script(script_location: str) -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config(script_location=Path(script_location)))


def script_heads(script_location: Path | None = None) -> list[str]:
    return list(_script(str(script_location or MIGRATIONS_DIR)).get_heads())


def alembic_config(
    db_url: str | None = None, connection: Connection | None = None, script_location: Path | None = None
) -> Config:
    """Alembic configured from code, so migrations run wherever the package is, whatever the cwd."""
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location or MIGRATIONS_DIR))
    if db_url is not None:
        cfg.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@dataclass(frozen=True)
class SchemaState:
    """Where a database stands relative to the migrations this code ships."""

    current: tuple[str, ...]  # revisions stamped in the database; () for a fresh one
    heads: tuple[str, ...]
    foreign_tables: bool  # tables exist but no alembic_version: not a TileLens history

    @property
    def up_to_date(self) -> bool:
        return set(self.current) == set(self.heads)


def _state(conn: Connection, script: ScriptDirectory, label: str) -> SchemaState:
    names = set(inspect(conn).get_table_names())
    current = tuple(MigrationContext.configure(conn).get_current_heads()) if VERSION_TABLE in names else ()
    known = {rev.revision for rev in script.walk_revisions()}
    heads = tuple(script.get_heads())
    unknown = [rev for rev in current if rev not in known]
    if unknown:
        raise SchemaTooNewError(label, unknown, ", ".join(heads))
    _check_stamp(current, script, label)
    if current and set(current) == set(heads):
        _check_tables(names, current, label)
    return SchemaState(
        current=current, heads=heads, foreign_tables=bool(names) and VERSION_TABLE not in names
    )


def _check_tables(names: set[str], current: tuple[str, ...], label: str) -> None:
    """A history stamped at the newest revision has every table of it: one dropped by hand is damage that
    no upgrade repairs (and that would fail later with a driver's traceback), so say so now."""
    from tilelens.store.sql.models import Base

    missing = sorted(set(Base.metadata.tables) - names)
    if missing:
        raise SchemaStampError(
            f"history {label} is damaged: it is stamped at revision {', '.join(current)} but has no "
            f"{', '.join(missing)} table{'s' if len(missing) > 1 else ''} (dropped by hand?); nothing was changed: "
            "restore the file or database from a backup"
        )


def _check_stamp(current: tuple[str, ...], script: ScriptDirectory, label: str) -> None:
    """One row per branch head: a revision stamped twice, or beside one of its own ancestors, is damage
    (a hand edit, a bad merge) that Alembic would stumble over with a traceback when upgrading."""
    if len(current) < 2:
        return
    shown = ", ".join(current)
    problem = f"history {label} has an inconsistent schema stamp: {VERSION_TABLE} holds {shown}"
    if len(set(current)) != len(current):
        raise SchemaStampError(f"{problem} (a revision twice)")
    for rev in current:
        below = {r.revision for r in script.iterate_revisions(rev, "base")} - {rev}
        older = sorted(below.intersection(current))
        if older:
            raise SchemaStampError(f"{problem} ({', '.join(older)} is older than {rev}, not a second branch)")


def inspect_schema(engine: Engine, label: str, script_location: Path | None = None) -> SchemaState:
    """Read-only look at the schema; raises SchemaTooNewError for a revision this code does not know."""
    script = _script(str(script_location or MIGRATIONS_DIR))
    with translate_errors(label), engine.connect() as conn:
        return _state(conn, script, label)


def ensure_schema(
    engine: Engine, label: str, script_location: Path | None = None
) -> tuple[SchemaState, SchemaState]:
    """Upgrade the database to head; returns the state before and after.

    A database at head is left untouched, and a newer or foreign one is refused before anything is written.
    The upgrade runs in one write transaction that re-checks the revision, so concurrent openers of a fresh
    history queue up and the later ones find it already migrated.
    """
    script = _script(str(script_location or MIGRATIONS_DIR))
    before = inspect_schema(engine, label, script_location)
    if before.foreign_tables:
        raise NotAHistoryError(
            f"{label} is a database of another program (it has tables but no TileLens schema)"
        )
    if before.up_to_date:
        return before, before

    with translate_errors(label), engine.connect() as conn:
        sqlite = is_sqlite(conn)
        raw: Any = conn.connection.driver_connection  # the DBAPI connection; open while conn is
        if sqlite:
            # SQLite cannot alter tables in place; batch migrations copy, drop and rename them. With foreign
            # keys on, the drop would cascade-delete child rows, and the rename would fail on any view that
            # names the table while it is briefly missing. So, as SQLite documents for this procedure: keys
            # off, legacy rename (views keep naming the table, which exists again after the rename), migrate,
            # foreign_key_check, commit. These pragmas are no-ops inside a transaction, so set them first.
            raw.execute("PRAGMA foreign_keys = OFF")
            raw.execute("PRAGMA legacy_alter_table = ON")
        try:
            conn.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
            with conn.begin():
                if conn.dialect.name == "postgresql":  # SQLite's IMMEDIATE queues concurrent openers already
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
                state = _state(conn, script, label)
                if state.foreign_tables:
                    raise NotAHistoryError(f"{label} is a database of another program")
                if not state.up_to_date:
                    command.upgrade(alembic_config(connection=conn, script_location=script_location), "heads")
                    if sqlite:
                        bad = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                        if bad:
                            raise HistoryError(f"migrating {label} would break foreign keys: {bad[:5]}")
                after = _state(conn, script, label)
        finally:
            if sqlite:
                raw.execute("PRAGMA legacy_alter_table = OFF")
                raw.execute("PRAGMA foreign_keys = ON")
    return before, after


def row_counts(engine: Engine, tables: Sequence[str]) -> dict[str, int]:
    with engine.connect() as conn:
        present = set(inspect(conn).get_table_names())
        return {
            name: conn.execute(select(func.count()).select_from(table(name))).scalar_one()
            for name in tables
            if name in present
        }


@contextlib.contextmanager
def translate_errors(label: str) -> Iterator[None]:
    """Turn driver errors about the file itself into one-line HistoryErrors that name the location."""
    try:
        yield
    except sa_exc.DBAPIError as exc:
        message = _first_line(exc)
        if isinstance(exc, sa_exc.DatabaseError) and "not a database" in message:
            raise NotAHistoryError(f"{label} is not a database ({message})") from exc
        from tilelens.store.sql import pgreader

        if pgreader.is_connect_failure(message):  # a server: down, refusing us, or without the database
            missing = pgreader.missing_database(message)
            if missing is not None:
                raise NoHistoryError(
                    f"cannot use history database {label}: database {missing!r} does not exist (TileLens "
                    f"creates tables, not databases: create it first, e.g. createdb {missing})"
                ) from exc
            raise HistoryError(
                f"cannot connect to history database {label}: {pgreader.connect_reason(message)}"
            ) from exc
        raise HistoryError(f"cannot use history database {label}: {message}") from exc


def _first_line(exc: Exception) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).splitlines()[0] if str(orig) else type(orig).__name__
