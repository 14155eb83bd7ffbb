"""Read-only opening: what is and is not a history, schema revisions without Alembic, readers beside writers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from tilelens.config import Location
from tilelens.store import History, NotAHistoryError, SchemaTooNewError
from tilelens.store.sql import database
from tilelens.store.sql.readonly import (
    NoHistoryError,
    ReadOnlyError,
    known_revisions,
    open_reader,
    statement_verb,
)


def test_known_revisions_match_alembic() -> None:
    known, heads = known_revisions()
    assert list(heads) == database.script_heads()
    assert {"0001", "0002"} <= known


def test_known_revisions_follow_branches_and_merges(tmp_path: Path) -> None:
    for name, rev, down in [
        ("a", "a1", None),
        ("b", "b1", '"a1"'),
        ("c", "c1", '"a1"'),
        ("m", "m1", '("b1", "c1")'),
    ]:
        (tmp_path / f"{name}.py").write_text(f'revision: str = "{rev}"\ndown_revision = {down}\n')
    assert known_revisions(tmp_path) == (frozenset({"a1", "b1", "c1", "m1"}), ("m1",))


def test_statement_verb() -> None:
    assert statement_verb("  -- note\n/* c */ (delete from x)") == "DELETE"
    assert statement_verb("with x as (select 1) select * from x") == "WITH"
    assert statement_verb("") == ""


def test_an_empty_or_foreign_database_is_not_a_history(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(NoHistoryError, match="empty"):
        open_reader(Location(f"sqlite:///{empty}", tmp_path))
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    with pytest.raises(NotAHistoryError, match="another program"):
        open_reader(Location(f"sqlite:///{foreign}", tmp_path))


def test_a_newer_schema_is_refused(history: History) -> None:
    with history.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999_future'")
    with pytest.raises(SchemaTooNewError, match="9999_future"):
        open_reader(history.location)


def test_readers_neither_wait_for_nor_see_an_open_write(history: History) -> None:
    with history.session(write=True) as writer:  # the write lock is held until the block ends
        writer.execute(
            sa.text(
                "INSERT INTO runs (uuid, argv, cwd, host, versions, status, started_at) "
                "VALUES ('u', '[]', '/', 'h', '{}', 'running', '2026-01-01 00:00:00+00')"
            )
        )
        with open_reader(history.location) as reader:
            assert reader.execute("SELECT count(*) FROM runs").rows == [(0,)]
            with pytest.raises(ReadOnlyError):
                reader.execute("DELETE FROM runs")
    with open_reader(history.location) as reader:
        assert reader.execute("SELECT count(*) FROM runs").rows == [(1,)]


def test_sqlite_through_a_url_is_read_only_too(sqlite_history: History, tmp_path: Path) -> None:
    """``file:`` URIs have no plain path: they go through SQLAlchemy with PRAGMA query_only."""
    path = sqlite_history.location.sqlite_path
    location = Location(f"sqlite:///file:{path}?mode=rw&uri=true", tmp_path)
    assert location.sqlite_path is None
    with open_reader(location) as reader:
        assert reader.execute("SELECT count(*) FROM launch_overview").rows == [(0,)]
        with pytest.raises(ReadOnlyError):
            reader.execute("DELETE FROM runs")
