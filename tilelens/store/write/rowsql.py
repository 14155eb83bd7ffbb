"""A recorded launch's rows into SQLite through the driver's cursor: SQLAlchemy's value conversions, not its
statement machinery.

Recording writes one short transaction per launch (``History.write_launch``): the blob rows it names, the
launch row, its argument rows; a replay writes its one row (``History.write_replay``). Through SQLAlchemy's
Session and Core each of those statements costs a few hundred microseconds of Python (cache keys,
compiled-statement lookup, result objects), about a millisecond and a half per launch: on a 10 ms launch, a
sixth of what recording may cost. Here the same INSERTs run on the
pooled connection's ``sqlite3`` cursor, in one ``BEGIN IMMEDIATE`` ... ``COMMIT``.

Invariant: every value stored is exactly what SQLAlchemy would store: each goes through the bind processor
SQLAlchemy itself uses for its column's type on this dialect (UTC timestamps as text, JSON with ``None`` as SQL
NULL), and the statements are the plain INSERTs (``OR IGNORE`` for blob rows) the Core path emits. Only SQLite
takes this path; PostgreSQL keeps the Core one. Anything other than an operational failure (a constraint, a
taken seq) rolls back and is left to the Core path, so its errors, retries and messages are unchanged.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.engine import Engine

from tilelens.store.sql.cursor import Processor
from tilelens.store.sql.database import write_failure


class RowInsert:
    """One table's INSERT for a fixed column list, with each column's bind processor."""

    def __init__(self, table: Table, columns: Sequence[str], dialect: Any, or_ignore: bool = False) -> None:
        missing = [c for c in columns if c not in table.c]
        if missing:
            raise ValueError(f"{table.name} has no column(s) {missing}")
        self.columns = tuple(columns)
        self.processors: tuple[Processor, ...] = tuple(
            table.c[c].type.dialect_impl(dialect).bind_processor(dialect) for c in columns
        )
        names = ", ".join(f'"{c}"' for c in columns)
        marks = ", ".join("?" for _ in columns)
        verb = "INSERT OR IGNORE" if or_ignore else "INSERT"
        self.sql = f'{verb} INTO "{table.name}" ({names}) VALUES ({marks})'

        self._pairs = tuple(zip(self.columns, self.processors, strict=True))

    def params(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple([row[c] if p is None else p(row[c]) for c, p in self._pairs])

    def many(self, rows: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [self.params(r) for r in rows]


class Fallback(Exception):
    """The fast path gave up before committing anything: the caller writes the launch the usual way."""


class LaunchWriter:
    """Rows of one recorded launch (blob rows, the launch row, its argument rows) or one replay row, each
    write in one SQLite transaction; returns the new row's id."""

    def __init__(self, engine: Engine, blobs: Table, launches: Table, args: Table, replays: Table) -> None:
        self.engine = engine
        self._tables = (blobs, launches, args, replays)
        self._inserts: dict[tuple[str, tuple[str, ...]], RowInsert] = {}

    def insert(self, table: Table, columns: Sequence[str], or_ignore: bool = False) -> RowInsert:
        key = (table.name, tuple(columns))
        ins = self._inserts.get(key)
        if ins is None:
            ins = self._inserts[key] = RowInsert(table, columns, self.engine.dialect, or_ignore)
        return ins

    def write(
        self, blob_rows: list[dict[str, Any]], launch: dict[str, Any], args: list[dict[str, Any]]
    ) -> int:
        """Raises :class:`Fallback` (nothing written) on any refusal but an operational one, which it lets
        through as ``sqlite3.OperationalError`` (locked past the busy timeout, read-only, disk full)."""
        blobs, launches, arg_table, _ = self._tables

        def statements(cur: sqlite3.Cursor) -> int:
            if blob_rows:
                ins = self.insert(blobs, list(blob_rows[0]), or_ignore=True)
                cur.executemany(ins.sql, ins.many(blob_rows))
            launch_id = self._one(cur, launches, launch)
            if args:
                rows = [{**a, "launch_id": launch_id} for a in args]
                ins = self.insert(arg_table, list(rows[0]))
                cur.executemany(ins.sql, ins.many(rows))
            return launch_id

        return self.transaction(statements)

    def attempt(self, write: Callable[..., int], *args: Any) -> int | None:
        """``write(*args)``'s new id; None when it gave up (:class:`Fallback`, nothing written). An operational
        failure becomes the ``HistoryError`` the Core path raises."""
        try:
            return write(*args)
        except Fallback:
            return None
        except sqlite3.OperationalError as exc:
            raise write_failure(self.engine, exc) from exc

    def write_replay(self, row: dict[str, Any]) -> int:
        """One replay row; errors as :meth:`write`."""
        replays = self._tables[3]
        return self.transaction(lambda cur: self._one(cur, replays, row))

    def _one(self, cur: sqlite3.Cursor, table: Table, row: dict[str, Any]) -> int:
        ins = self.insert(table, list(row))
        cur.execute(ins.sql, ins.params(row))
        if cur.lastrowid is None:
            raise Fallback("no row id")
        return int(cur.lastrowid)

    def transaction(self, statements: Callable[[sqlite3.Cursor], int]) -> int:
        raw = self.engine.raw_connection()
        try:
            conn: sqlite3.Connection = raw.driver_connection  # type: ignore[assignment]  # SQLite only
            cur = conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                new_id = statements(cur)
                cur.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.rollback()
                if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
                    raise Fallback(str(exc)) from exc
                raise
            finally:
                cur.close()
            return new_id
        finally:
            raw.close()
