"""Fuzzing the read-only gate of ``tilelens sql``: no spelling of a write gets through (issue 12).

Statements that write (DML, DDL, PRAGMA assignments, ATTACH, VACUUM, transactions, load_extension) are
disguised with random letter case, comments and odd whitespace between tokens, leading parentheses and
comments, and extra statements before or after. Every one must be refused, and the history (in rollback-
journal mode, so a write that slipped through would land in the file itself or a journal beside it) and its
folder must stay byte for byte as they were.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilelens.config import Location, resolve_location
from tilelens.errors import QueryError, ReadOnlyError
from tilelens.store import History
from tilelens.store.read.query import open_query

WRITES = [
    "DELETE FROM runs",
    "UPDATE runs SET tag = 'x'",
    "INSERT INTO runs (id) VALUES (99)",
    "INSERT INTO runs SELECT * FROM runs",
    "REPLACE INTO blobs VALUES ('a', 'b', 1, 1, 'now')",
    "INSERT OR IGNORE INTO kernels (id) VALUES (7)",
    "WITH d AS (SELECT id FROM runs) DELETE FROM runs WHERE id IN d",
    "DROP TABLE launch_args",
    "DROP VIEW launch_overview",
    "DROP INDEX IF EXISTS ix_runs_started_at",  # one that exists: IF EXISTS of a missing one writes nothing
    "CREATE TABLE notes (x)",
    "CREATE TEMP TABLE notes (x)",
    "CREATE INDEX ix ON runs (tag)",
    "CREATE VIEW v AS SELECT 1",
    "CREATE TRIGGER t AFTER INSERT ON runs BEGIN DELETE FROM runs; END",
    "CREATE VIRTUAL TABLE v USING fts5(x)",
    "ALTER TABLE runs ADD COLUMN z",
    "ALTER TABLE runs RENAME TO r2",
    "VACUUM",
    "VACUUM INTO '{dir}/copy.db'",
    "REINDEX",
    "ANALYZE",
    "ATTACH DATABASE '{dir}/other.db' AS o",
    "ATTACH ':memory:' AS m",
    "SELECT load_extension('{dir}/ext.so')",
    "BEGIN IMMEDIATE",
    "BEGIN EXCLUSIVE",
    "SAVEPOINT s",
    "PRAGMA user_version = 7",
    "PRAGMA main.user_version = 7",
    "PRAGMA application_id = 5",
    "PRAGMA journal_mode = WAL",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA query_only = OFF",
    "PRAGMA writable_schema = ON",
    "PRAGMA wal_checkpoint(TRUNCATE)",
    "PRAGMA incremental_vacuum",
    "PRAGMA optimize",
    "PRAGMA auto_vacuum = FULL",
    "PRAGMA page_size = 1024",
    "PRAGMA locking_mode = EXCLUSIVE",
]
SEPARATORS = [" ", "  ", "\n", "\t", " /* x */ ", "/**/", " -- c\n", "\r\n"]
PREFIXES = ["", " ", "\n\n", "/* lead */", "-- lead\n", "(", "EXPLAIN QUERY PLAN SELECT 1;", "SELECT 1; "]
SUFFIXES = ["", ";", " ;  ", "; SELECT 1", "; DELETE FROM runs", " -- trailing", "/* end */"]


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Location]:
    folder = tmp_path_factory.mktemp("gate")
    location = resolve_location(str(folder / "h.db"), env={})
    with History.open(location=location):
        pass
    conn = sqlite3.connect(folder / "h.db")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute(
        "INSERT INTO runs (argv, cwd, host, versions, status, started_at) "
        "VALUES ('[]', '/', 'h', '{}', 'ok', '2026-01-01 00:00:00')"
    )
    conn.commit()
    conn.close()
    yield location


def _state(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()
    }


@st.composite
def disguised_writes(draw: st.DrawFn) -> str:
    statement = draw(st.sampled_from(WRITES))
    words = statement.split(" ")
    cased = [
        "".join(c.upper() if draw(st.booleans()) else c.lower() for c in word) if "'" not in word else word
        for word in words
    ]
    text = cased[0]
    for word in cased[1:]:
        text += draw(st.sampled_from(SEPARATORS)) + word
    return draw(st.sampled_from(PREFIXES)) + text + draw(st.sampled_from(SUFFIXES))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sql=disguised_writes())
def test_every_disguised_write_is_refused_and_changes_nothing(victim: Location, sql: str) -> None:
    folder = victim.sqlite_path.parent  # type: ignore[union-attr]
    sql = sql.replace("{dir}", str(folder))
    before = _state(folder)
    with open_query(location=victim) as q:
        with pytest.raises((ReadOnlyError, QueryError)):
            q.sql(sql)
        # the connection still reads, and sees the history as it was
        assert q.sql("SELECT count(*), max(tag) FROM runs").rows == [(1, None)]
        with pytest.raises(ReadOnlyError):
            q.sql("DELETE FROM runs")
    assert _state(folder) == before, sql
