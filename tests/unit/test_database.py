"""Schema management: created only by migrations, upgraded on open, newer or foreign databases refused."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from tests import store_helpers
from tilelens.config import Location, resolve_location
from tilelens.store import History, HistoryError, NotAHistoryError, SchemaTooNewError
from tilelens.store.sql import database
from tilelens.store.sql.models import TABLES, Base

REPO = Path(__file__).resolve().parents[2]


def test_fresh_history_gets_head_revision_and_every_table(history: History) -> None:
    assert history.revision() == tuple(database.script_heads())
    assert history.migrated_from == ()
    with history.engine.connect() as conn:
        assert set(TABLES) <= set(sa.inspect(conn).get_table_names())


def test_fresh_file_gets_sqlite_settings(sqlite_history: History) -> None:
    history = sqlite_history
    with history.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert set(TABLES) <= set(sa.inspect(conn).get_table_names())


def test_models_and_migrations_agree(history: History) -> None:
    with history.engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diffs == []


def test_compare_metadata_would_notice_a_difference(history: History) -> None:
    """Guards the test above against passing vacuously."""
    md = sa.MetaData()
    for table in Base.metadata.sorted_tables:
        table.to_metadata(md)
    sa.Table("launches", md, sa.Column("extra", sa.Integer()), extend_existing=True)
    with history.engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), md)
    assert [d[0] for d in diffs] == ["add_column"]


_WRITES = ("INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "DROP")


@contextlib.contextmanager
def _statements() -> Iterator[list[str]]:
    """Every statement any engine sends while the block runs."""
    seen: list[str] = []

    def note(conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        seen.append(statement.lstrip().upper())

    sa.event.listen(sa.Engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", note)


def test_reopening_at_head_writes_nothing(history_location: Location) -> None:
    History.open(location=history_location).close()
    path = history_location.sqlite_path
    before = path.read_bytes() if path is not None else b""
    with _statements() as seen, History.open(location=history_location) as h:
        assert h.migrated_from == h.revision()
    assert seen and not [s for s in seen if s.startswith(_WRITES)]
    if path is not None:
        assert path.read_bytes() == before


def _stamp(location: Location, revision: str) -> None:
    engine = sa.create_engine(location.db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    engine.dispose()


def _revisions(location: Location) -> list[str]:
    engine = sa.create_engine(location.db_url)
    with engine.connect() as conn:
        revisions = [r[0] for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version")]
    engine.dispose()
    return revisions


def test_newer_schema_is_refused_and_left_untouched(history_location: Location) -> None:
    with History.open(location=history_location) as h:
        h.begin_run(store_helpers.run_info())
    _stamp(history_location, "9999_from_the_future")
    path = history_location.sqlite_path
    before = path.read_bytes() if path is not None else b""
    with _statements() as seen, pytest.raises(SchemaTooNewError, match="9999_from_the_future") as info:
        History.open(location=history_location)
    assert "newer" in str(info.value)
    assert not [s for s in seen if s.startswith(_WRITES)]
    assert _revisions(history_location) == ["9999_from_the_future"]
    if path is not None:
        assert path.read_bytes() == before
        assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0


def _migrations_with_extra_revisions(tmp_path: Path) -> Path:
    """The shipped migrations plus two test revisions on top of their head: a view over ``launches``, then a
    batch change that recreates ``launches`` (copy, drop, rename), the way future SQLite migrations will."""
    scripts = tmp_path / "migrations"
    shutil.copytree(REPO / "migrations", scripts, ignore=shutil.ignore_patterns("__pycache__"))
    (head,) = database.script_heads()
    (scripts / "versions" / "9001_test_view.py").write_text(
        "from alembic import op\n\n"
        f'revision = "9001_test"\ndown_revision = "{head}"\nbranch_labels = None\ndepends_on = None\n\n\n'
        "def upgrade():\n"
        '    op.execute("CREATE VIEW test_oob AS SELECT id, oob_lanes FROM launches WHERE oob_lanes > 0")\n\n\n'
        "def downgrade():\n"
        '    op.execute("DROP VIEW test_oob")\n'
    )
    (scripts / "versions" / "9002_test_recreate.py").write_text(
        "import sqlalchemy as sa\n"
        "from alembic import op\n\n"
        'revision = "9002_test"\ndown_revision = "9001_test"\nbranch_labels = None\ndepends_on = None\n\n\n'
        "def _recreate():\n"  # SQLite copies the table; PostgreSQL alters it in place
        '    return "always" if op.get_bind().dialect.name == "sqlite" else "auto"\n\n\n'
        "def upgrade():\n"
        '    with op.batch_alter_table("launches", recreate=_recreate()) as batch:\n'
        '        batch.add_column(sa.Column("note", sa.Text(), nullable=True))\n\n\n'
        "def downgrade():\n"
        '    with op.batch_alter_table("launches", recreate=_recreate()) as batch:\n'
        '        batch.drop_column("note")\n'
    )
    return scripts


def test_old_revision_is_upgraded_on_open_and_keeps_its_rows(
    tmp_path: Path, history_location: Location
) -> None:
    scripts = _migrations_with_extra_revisions(tmp_path)
    with History.open(location=history_location) as h:  # at the shipped head
        run = h.begin_run(store_helpers.run_info())
        launch_id = h.write_launch(run, store_helpers.launch())
    with History.open(location=history_location, script_location=scripts) as h:
        assert h.migrated_from == tuple(database.script_heads())
        assert database.inspect_schema(h.engine, "t", scripts).current == ("9002_test",)
        with h.engine.connect() as conn:
            cols = {c["name"] for c in sa.inspect(conn).get_columns("launches")}
            assert "note" in cols
            # The batch copy-and-drop of ``launches`` must not cascade into its children.
            assert conn.exec_driver_sql("SELECT count(*) FROM launch_args").scalar() == 4
            assert conn.exec_driver_sql("SELECT id FROM launches").scalar() == launch_id
            assert conn.exec_driver_sql("SELECT count(*) FROM test_oob").scalar() == 0  # the view still works
            if conn.dialect.name == "sqlite":
                assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
                assert conn.exec_driver_sql("PRAGMA legacy_alter_table").scalar() == 0


def test_code_older_than_history_refuses_the_newer_revision(
    tmp_path: Path, history_location: Location
) -> None:
    scripts = _migrations_with_extra_revisions(tmp_path)
    History.open(location=history_location, script_location=scripts).close()
    with pytest.raises(SchemaTooNewError, match="9002_test"):
        History.open(location=history_location)


def test_text_file_is_not_a_history_and_stays_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some notes\n" * 100)
    with pytest.raises(NotAHistoryError, match="not a database"):
        History.open(str(path))
    assert path.read_text() == "just some notes\n" * 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("content", [b"x", b"SQLite", b"\x00" * 4000])
def test_short_or_binary_non_sqlite_file_is_not_overwritten(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "h.db"
    path.write_bytes(content)
    with pytest.raises(NotAHistoryError, match="not a database"):
        History.open(str(path))
    assert path.read_bytes() == content


def test_database_of_another_program_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(NotAHistoryError, match="another program"):
        History.open(str(path))
    assert path.read_bytes() == before


def test_directory_as_database_is_a_history_error(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="directory"):
        History.open(str(tmp_path))


def test_missing_driver_is_a_history_error(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="nosuchdialect"):
        History.open("nosuchdialect://host/db", blobs=tmp_path)


def test_insert_ignore_skips_existing_keys(history: History) -> None:
    from tilelens.records import utcnow
    from tilelens.store.sql.models import Blob

    row = {"sha256": "ab" * 32, "kind": "raw", "size": 1, "rows": None, "created_at": utcnow()}
    for _ in range(2):
        with database.write_session(history.engine) as s:
            database.insert_ignore(s, Blob.__table__, [row, {**row, "sha256": "cd" * 32}], keys=("sha256",))
    assert history.counts()["blobs"] == 2


def test_alembic_command_line_config_targets_the_tilelens_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from alembic.config import Config

    db = tmp_path / "cli.db"
    monkeypatch.setenv("TILELENS_DB", str(db))
    cfg = Config(str(REPO / "alembic.ini"))
    command.upgrade(cfg, "head")
    with History.open(location=resolve_location()) as h:
        assert h.migrated_from == tuple(database.script_heads())
    command.downgrade(cfg, "base")
    with sqlite3.connect(db) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert names.isdisjoint(TABLES)
