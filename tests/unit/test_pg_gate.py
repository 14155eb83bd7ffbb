"""The read-only gate on both backends: writes refused alike, nothing reaches outside the database, timeouts.

PostgreSQL's READ ONLY transaction alone lets a superuser read server files, run programs, create large
objects and end the transaction; these tests try each way out (the test server's user is a superuser, the
worst case) and check that nothing changed: row counts, the schema, no file written by the server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import store_helpers
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tests.postgres import PostgresServer
from tilelens.config import resolve_location
from tilelens.errors import QueryError, QueryTimeoutError, ReadOnlyError
from tilelens.store import History
from tilelens.store.sql.readonly import open_reader

REFUSED = "the history is open read-only, nothing was changed"


def _fill(history: History) -> History:
    run = history.begin_run(store_helpers.run_info(tag="gate"))
    history.write_launch(run, store_helpers.launch(trace=store_helpers.trace_table()))
    history.finish_run(run, "ok", 0)
    return history


@pytest.fixture
def filled(history: History) -> History:
    return _fill(history)


def _state(h: History) -> tuple[dict[str, int], list[str]]:
    if h.engine.dialect.name == "sqlite":
        with open_reader(h.location) as r:
            views = r.execute("SELECT count(*) FROM launch_overview").rows
    else:  # the catalog is no table of the history: the gate refuses it, so ask as the owner
        with h.engine.connect() as conn:
            views = [tuple(conn.exec_driver_sql("SELECT count(*) FROM pg_views").one())]
    return h.counts(), [str(views)]


# The same statement, the same one line on both backends.
@pytest.mark.parametrize(
    ("statement", "what"),
    [
        ("DELETE FROM launches", "DELETE"),
        ("UPDATE runs SET tag = 'x'", "UPDATE"),
        ("INSERT INTO runs (id) VALUES (99)", "INSERT"),
        ("DROP TABLE launch_args", "DROP"),
        ("DROP VIEW launch_overview", "DROP"),
        ("CREATE TABLE notes (x int)", "CREATE"),
        ("CREATE TEMP TABLE notes (x int)", "CREATE"),
        ("  /* hidden */ DELETE FROM runs", "DELETE"),
        ("BEGIN", "BEGIN"),
        ("COMMIT", "COMMIT"),
        ("ATTACH DATABASE 'x.db' AS other", "ATTACH"),
    ],
)
def test_writes_are_refused_alike_on_both(filled: History, statement: str, what: str) -> None:
    before = _state(filled)
    with open_reader(filled.location) as r, pytest.raises(ReadOnlyError) as info:
        r.execute(statement)
    assert str(info.value) == f"refused {what}: {REFUSED}"
    assert _state(filled) == before


def test_several_statements_are_one_error_on_both(filled: History) -> None:
    before = _state(filled)
    with open_reader(filled.location) as r:
        with pytest.raises(QueryError, match="^SQL error: one statement at a time$"):
            r.execute("SELECT 1; DELETE FROM runs")
        assert r.execute("SELECT count(*) FROM runs").rows == [(1,)]  # the reader goes on after an error
    assert _state(filled) == before


def test_a_long_statement_is_stopped_on_both(filled: History) -> None:
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    with open_reader(filled.location) as r:
        with pytest.raises(QueryTimeoutError) as info, r.stream(endless, timeout=0.5) as rows:
            list(rows)
        assert str(info.value) == "query stopped: it ran past its 0.5 s timeout"
        assert r.execute("SELECT count(*) FROM launches").rows == [(1,)]  # the reader goes on


# -- PostgreSQL's ways out of a READ ONLY transaction -----------------------------------------------------------


@pytest.fixture
def pg_filled(postgres_server: PostgresServer, tmp_path: Path) -> Iterator[History]:
    """A PostgreSQL history with one launch (these attacks have no SQLite counterpart)."""
    url = postgres_server.url(postgres_server.create_database())
    with History.open(location=resolve_location(url, tmp_path / "blobs", env={})) as h:
        yield _fill(h)


@pytest.mark.parametrize(
    ("statement", "what"),
    [
        ("SELECT pg_read_file('/etc/hostname')", "function pg_read_file()"),
        ("SELECT pg_catalog.\"pg_read_file\"('/etc/hostname')", "function pg_read_file()"),
        ("select PG_READ_BINARY_FILE /* x */ ('/etc/hostname')", "function pg_read_binary_file()"),
        ("SELECT * FROM pg_ls_dir('.')", "function pg_ls_dir()"),
        ("SELECT lo_import('/etc/hostname')", "function lo_import()"),
        ("SELECT lo_export(1, '/tmp/x')", "function lo_export()"),
        ("SELECT set_config('default_transaction_read_only', 'off', false)", "function set_config()"),
        ("SELECT set_config('role', 'postgres', true)", "function set_config()"),
        ("SELECT * FROM query_to_xml('DELETE FROM runs', true, true, '')", "function query_to_xml()"),
        ("SELECT dblink_exec('dbname=x', 'DELETE FROM runs')", "function dblink_exec()"),
        ("SELECT pg_terminate_backend(1)", "function pg_terminate_backend()"),
        ("SELECT pg_advisory_lock(1)", "function pg_advisory_lock()"),
        ("SELECT U&\"pg\\005fread_file\"('/etc/hostname')", "function pg_read_file()"),
        ("COPY (SELECT 1) TO PROGRAM 'touch /tmp/tilelens-gate'", "COPY"),
        ("COPY runs FROM '/etc/hostname'", "COPY"),
        ("SET TRANSACTION READ WRITE", "SET"),
        ("SET default_transaction_read_only = off", "SET"),
        ("RESET ROLE", "RESET"),
        ("DO $$ BEGIN DELETE FROM runs; END $$", "DO"),
        ("TRUNCATE runs CASCADE", "TRUNCATE"),
        ("VACUUM", "VACUUM"),
        ("WITH gone AS (DELETE FROM runs RETURNING id) SELECT count(*) FROM gone", "DELETE"),
        ("SELECT * INTO TABLE copied FROM runs", "SELECT INTO"),
        ("SELECT * FROM runs FOR UPDATE", "SELECT FOR UPDATE"),
        ("SELECT nextval('runs_id_seq')", "function nextval()"),
        ("EXPLAIN ANALYZE DELETE FROM runs", "DELETE"),
    ],
)
def test_no_way_out_of_the_read_only_gate(pg_filled: History, statement: str, what: str) -> None:
    before = _state(pg_filled)
    marker = Path("/tmp/tilelens-gate")
    with open_reader(pg_filled.location) as r:
        with pytest.raises(ReadOnlyError) as info:
            r.execute(statement)
        assert str(info.value) == f"refused {what}: {REFUSED}"
        # The connection stays read-only afterwards, whatever the statement tried.
        assert r.execute("SHOW transaction_read_only").rows == [("on",)]
        with pytest.raises(ReadOnlyError):
            r.execute("DELETE FROM runs")
    assert _state(pg_filled) == before
    assert not marker.exists()


def test_a_superuser_reads_as_pg_read_all_data(pg_filled: History) -> None:
    with open_reader(pg_filled.location) as r:
        # (current_user is no pure function of the history: asked through the gate's own connection)
        assert r.gate.conn.scalar("SELECT current_user") == "pg_read_all_data"
        assert r.execute("SELECT count(*) FROM launch_overview").rows == [(1,)]
        # A system catalog is no table of the history.
        with pytest.raises(ReadOnlyError, match="^refused table pg_hba_file_rules: "):
            r.execute("SELECT * FROM pg_hba_file_rules")


def test_the_cli_refuses_alike(pg_filled: History) -> None:
    where = ["--db", pg_filled.location.db_url, "--blobs", pg_filled.location.blobs_dir]
    line = one_line_error(tilelens_in_process(*where, "sql", "SELECT pg_read_file('/etc/passwd')"))
    assert line == f"tilelens: error: refused function pg_read_file(): {REFUSED}"
    assert os.path.exists("/etc/passwd")
