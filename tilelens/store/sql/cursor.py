"""SELECTs compiled once by SQLAlchemy and run on a SQLite file's driver cursor: SQLAlchemy's value
conversions, not its statement machinery (the replay's launch reads, ``store.read.launches``).

Also what a reader asks of an open history (:class:`Opened`): its engine, a session and its name, so the read
tier takes a ``store.write.history.History`` without importing the write tier.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import SimpleNamespace
from typing import Any, Protocol

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

Processor = Callable[[Any], Any] | None


class Opened(Protocol):
    """An open history as a reader uses it (``History`` is one)."""

    engine: Engine

    @property
    def label(self) -> str: ...

    def session(self, write: bool = False) -> AbstractContextManager[Session]: ...


class CursorQuery:
    """A SELECT compiled once by SQLAlchemy, run on the sqlite3 cursor; each column through SQLAlchemy's own
    result processor for its type (JSON decoded, as a Core query returns it). Rows come back as namespaces
    with the selected columns' keys as attributes, like a Core ``Row``."""

    def __init__(self, stmt: Any, dialect: Any) -> None:
        compiled = stmt.compile(dialect=dialect)
        self.sql = str(compiled)
        self.binds = tuple(compiled.positiontup or ())
        columns = list(stmt.selected_columns)
        self.keys = tuple(c.key for c in columns)
        self.processors: tuple[Processor, ...] = tuple(
            c.type.dialect_impl(dialect).result_processor(dialect, None) for c in columns
        )

    def rows(self, cur: sqlite3.Cursor, **params: Any) -> list[SimpleNamespace]:
        out = []
        for raw in cur.execute(self.sql, tuple(params[b] for b in self.binds)):
            values = (v if p is None else p(v) for v, p in zip(raw, self.processors, strict=True))
            out.append(SimpleNamespace(**dict(zip(self.keys, values, strict=True))))
        return out


def read(
    engine: Engine, queries: Sequence[tuple[CursorQuery, dict[str, Any]]]
) -> list[list[SimpleNamespace]]:
    """Run ``queries`` in one read transaction (one snapshot of the file) on a pooled connection."""
    raw = engine.raw_connection()
    try:
        conn: sqlite3.Connection = raw.driver_connection  # type: ignore[assignment]  # SQLite only
        cur = conn.cursor()
        try:
            cur.execute("BEGIN")
            try:
                return [q.rows(cur, **params) for q, params in queries]
            finally:
                conn.rollback()  # nothing was written: ends the read snapshot
        finally:
            cur.close()
    finally:
        raw.close()
