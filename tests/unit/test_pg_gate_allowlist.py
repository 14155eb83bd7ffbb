"""The PostgreSQL ``sql`` gate is an allowlist over PostgreSQL's own parse tree (issue 47, point 1).

The denylist it replaces let ``ts_rewrite(tsquery, text)`` run a query given as text, with the function's name
assembled from strings: the server's /etc/hostname was printed, ``current_user`` restored after
``set_config('role', ...)``, ``/`` listed, another client's backend terminated and advisory locks taken. Every
one of those, and the other ways out the issue lists, must now be refused before the server sees it; the
test server's user is a superuser (the worst case). A reader role (``tilelens db grant-reader``) is the
server's own second wall.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import store_helpers
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tests.postgres import PostgresServer
from tilelens.config import resolve_location
from tilelens.errors import QueryError, ReadOnlyError
from tilelens.store import History
from tilelens.store.sql import libpq
from tilelens.store.sql.pgparse import Allowed, check_read
from tilelens.store.sql.readonly import open_reader
from tilelens.store.sql.urls import postgres_connect_args

HOSTNAME = socket.gethostname()
REFUSED = "the history is open read-only, nothing was changed"
# The query, as it printed the server's /etc/hostname.
TS_REWRITE = (
    "SELECT ts_rewrite('a'::tsquery, 'SELECT ''a''::tsquery, quote_literal(replace(pg_'||'read_file("
    "''/etc/hostname''),chr(10),''''))::tsquery')"
)


def _through_ts_rewrite(call: str) -> str:
    """``call`` (SQL text; its quotes doubled here) run by ts_rewrite as the query it is given."""
    inner = f"SELECT 'a'::tsquery, quote_literal(({call})::text)::tsquery"
    return "SELECT ts_rewrite('a'::tsquery, '" + inner.replace("'", "''") + "')"


ESCAPES = [
    TS_REWRITE,
    _through_ts_rewrite("set_config('role', 'postgres', true)"),
    _through_ts_rewrite("(SELECT string_agg(x, ',') FROM pg_ls_dir('/') x)"),
    _through_ts_rewrite("pg_terminate_backend({pid})"),
    _through_ts_rewrite("pg_advisory_lock(47)"),
    "SELECT * FROM ts_stat('SELECT to_tsvector(pg_read_file(''/etc/hostname''))')",
    "SELECT query_to_xml('SELECT pg_read_file(''/etc/hostname'')', true, true, '')",
    "SELECT query_to_xml('SELECT pg_'||'read_file(''/etc/hostname'')', true, true, '')",
    "SELECT xpath('/row/x/text()', query_to_xml('SELECT 1 AS x', true, true, ''))",
    "SELECT xpath('/a', '<a/>')",
    "SELECT dblink('dbname=postgres', 'SELECT 1')",
    "SELECT dblink_exec('dbname=postgres', 'DROP TABLE runs')",
    "SELECT lo_import('/etc/hostname')",
    "SELECT lo_from_bytea(0, 'x')",
    "SELECT lo_get(1)",
    "SELECT loread(lo_open(1, 262144), 10)",
    "COPY (SELECT 1) TO PROGRAM 'touch /tmp/tilelens-gate47'",
    "COPY runs TO '/tmp/tilelens-gate47'",
    "DO $$ BEGIN PERFORM pg_sleep(0); END $$",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT current_setting('data_directory')",
    "SELECT pg_sleep(30)",
    "SELECT pg_cancel_backend({pid})",
    "SELECT pg_terminate_backend({pid})",
    "SELECT pg_advisory_lock(47)",
    "SELECT pg_try_advisory_xact_lock(47)",
    "SELECT txid_current()",
    "SELECT txid_current_snapshot()",
    "SELECT pg_current_xact_id()",
    "SELECT nextval('runs_id_seq')",
    "SELECT pg_notify('c', 'x')",
    "SELECT ('pg_read_'||'file')::regproc",
    "SELECT 'pg_read_file'::regproc::oid",
    "SELECT 'pg_read_file(text)'::regprocedure",
    "SELECT 'runs'::regclass",
    "SELECT CAST('pg_read_file' AS pg_catalog.regproc)",
    "SELECT \"pg_read_file\"('/etc/hostname')",
    "SELECT pg_catalog . pg_read_file ( '/etc/hostname' )",
    "SELECT/**/pg_read_file/**/('/etc/hostname')",
    "SELECT 'x' -- pg_sleep\n, pg_read_file('/etc/hostname')",
    "SELECT $q$ ' $q$, pg_read_file('/etc/hostname')",
    "SELECT U&\"pg!005fread!005ffile\" UESCAPE '!' ('/etc/hostname')",
    "SELECT U&\"\\0070g_read_file\"('/etc/hostname')",
    "SELECT public.lower('x')",
    "SELECT 1 OPERATOR(public.+) 1",
    "SELECT * FROM pg_authid",
    "SELECT * FROM pg_catalog.pg_shadow",
    "TABLE pg_authid",
    "SELECT * FROM information_schema.role_table_grants",
    "SELECT * FROM other_db.public.runs",
    "WITH pg_authid AS (SELECT * FROM pg_authid) SELECT * FROM pg_authid",
    "SELECT * FROM (WITH pg_authid AS (SELECT 1) SELECT 1) a, pg_authid",
    "SELECT * FROM runs TABLESAMPLE SYSTEM (50)",
    "SELECT xmlparse(document '<a/>')",
    "SELECT current_user",
    "SHOW data_directory",
    "SHOW hba_file",
    "EXPLAIN (ANALYZE) SELECT pg_sleep(30)",
    "SELECT * FROM runs FOR SHARE",
    "SELECT 1 INTO TEMP t",
    "SELECT count(*) FROM runs; SELECT pg_read_file('/etc/hostname')",
    "VALUES (pg_read_file('/etc/hostname'))",
    "SELECT (SELECT pg_read_file('/etc/hostname'))",
    "SELECT 1 WHERE EXISTS (SELECT pg_ls_dir('/'))",
    "SELECT * FROM generate_series(1, 2) g, LATERAL pg_ls_dir('/')",
]


@pytest.fixture(scope="module")
def pg(postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    url = postgres_server.url(postgres_server.create_database())
    location = resolve_location(url, tmp_path_factory.mktemp("blobs"), env={})
    with History.open(location=location) as h:
        run = h.begin_run(store_helpers.run_info(tag="gate"))
        h.write_launch(run, store_helpers.launch(trace=store_helpers.trace_table()))
        h.finish_run(run, "ok", 0)
        yield h


@pytest.fixture
def bystander(pg: History) -> Iterator[libpq.Connection]:
    """Another client of the server: its backend must survive, and it sees every lock taken."""
    conn = libpq.Connection(postgres_connect_args(pg.location.db_url))
    yield conn
    conn.close()


@pytest.mark.parametrize("statement", ESCAPES)
def test_every_escape_is_refused(pg: History, bystander: libpq.Connection, statement: str) -> None:
    pid = bystander.scalar("SELECT pg_backend_pid()")
    statement = statement.replace("{pid}", str(pid))
    before = pg.counts()
    with open_reader(pg.location) as r:
        with pytest.raises((ReadOnlyError, QueryError)) as info:
            r.execute(statement)
        assert HOSTNAME not in str(info.value)
        assert str(info.value).startswith(("refused ", "SQL error: one statement at a time"))
        assert r.execute("SELECT count(*) FROM runs").rows == [(1,)]  # the reader goes on
    assert bystander.scalar("SELECT 1") == "1"  # not terminated, not cancelled
    assert bystander.scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == "0"
    assert pg.counts() == before
    assert not Path("/tmp/tilelens-gate47").exists()


@pytest.mark.parametrize(
    ("statement", "what"),
    [
        (TS_REWRITE, "function ts_rewrite()"),
        ("SELECT query_to_xml('x', true, true, '')", "function query_to_xml()"),
        ("SELECT ('pg_read_'||'file')::regproc", "type regproc"),
        ("SELECT U&\"pg!005fread!005ffile\" UESCAPE '!' ('/etc/hostname')", "function pg_read_file()"),
        ("SELECT * FROM pg_authid", "table pg_authid"),
        ("WITH pg_authid AS (SELECT * FROM pg_authid) SELECT * FROM pg_authid", "table pg_authid"),
        ("SELECT pg_sleep(30)", "function pg_sleep()"),
        ("SELECT 1 OPERATOR(public.+) 1", "operator public.+"),
        ("SHOW data_directory", "SHOW data_directory"),
        ("SELECT * FROM runs FOR SHARE", "SELECT FOR UPDATE"),
    ],
)
def test_the_refusal_names_what_was_refused(pg: History, statement: str, what: str) -> None:
    with open_reader(pg.location) as r, pytest.raises(ReadOnlyError) as info:
        r.execute(statement)
    assert str(info.value) == f"refused {what}: {REFUSED}"


READS = [
    ("SELECT count(*) FROM launches", [(1,)]),
    ("select COUNT(*) from LAUNCHES l join RUNS r on r.id = l.run_id where r.tag = 'gate'", [(1,)]),
    ("SELECT status, count(*) FILTER (WHERE status = 'ok') FROM runs GROUP BY status", [("ok", 1)]),
    (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3) SELECT sum(i) FROM n",
        [(6,)],
    ),
    ("WITH x AS (SELECT id FROM runs) SELECT count(*) FROM x", [(1,)]),
    ("SELECT row_number() OVER (ORDER BY id), lower(upper('Ab')) FROM runs", [(1, "ab")]),
    (
        "SELECT coalesce(NULL, 2), greatest(1, 3), nullif(1, 1), 7 % 4, 2 ^ 3, '1'::int + 1",
        [(2, 3, None, 3, 8.0, 2)],
    ),
    ("SELECT '{\"a\": {\"b\": 5}}'::jsonb -> 'a' ->> 'b', jsonb_typeof('[1]')", [("5", "array")]),
    ("SELECT array_length(ARRAY[1, 2, 3], 1), 2 = ANY (ARRAY[1, 2])", [(3, 1)]),
    ('SELECT count(*) FROM json_each(\'{"a": 1, "b": 2}\')', [(2,)]),
    ("SELECT 'ts_rewrite(pg_read_file)' AS harmless_text", [("ts_rewrite(pg_read_file)",)]),
    ("SELECT EXTRACT(year FROM DATE '2026-12-05'), substring('abcdef' FROM 2 FOR 3)", [(2026, "bcd")]),
    (
        "SELECT CASE WHEN id > 0 THEN 'p' ELSE 'n' END FROM public.runs WHERE id IN (SELECT run_id FROM launches)",
        [("p",)],
    ),
    ("SELECT count(*) FROM launch_overview", [(1,)]),
    ("VALUES (1, 'a')", [(1, "a")]),
    ("TABLE alembic_version", None),
    ("SHOW transaction_read_only", [("on",)]),
]


@pytest.mark.parametrize(("statement", "rows"), READS)
def test_plain_reads_still_work(pg: History, statement: str, rows: list[tuple[object, ...]] | None) -> None:
    with open_reader(pg.location) as r:
        got = r.execute(statement).rows
    if rows is not None:
        assert got == rows


def test_the_check_needs_no_server() -> None:
    allowed = Allowed(frozenset({"runs"}))
    assert check_read("SELECT count(*) FROM runs", allowed) == "SELECT"
    assert check_read("EXPLAIN SELECT * FROM runs", allowed) == "EXPLAIN"
    with pytest.raises(ReadOnlyError, match="function ts_rewrite"):
        check_read(TS_REWRITE, allowed)
    with pytest.raises(QueryError, match='^SQL error: syntax error at or near "runs"$'):
        check_read("SELECT 1 FORM runs", allowed)


# -- least privilege: a reader role ---------------------------------------------------------------------


def test_grant_reader_prints_the_sql(pg: History) -> None:
    where = ["--db", pg.location.db_url, "--blobs", str(pg.location.blobs_dir)]
    result = tilelens_in_process(*where, "db", "grant-reader", "tl_printed")
    assert result.returncode == 0, result.stderr
    assert 'CREATE ROLE "tl_printed" LOGIN' in result.stdout
    assert 'GRANT SELECT ON "public"."alembic_version", ' in result.stdout
    assert '"public"."launch_overview"' in result.stdout and '"public"."runs"' in result.stdout
    assert "INSERT" not in result.stdout and "ALL" not in result.stdout.replace("ALTER", "")
    # printing changes nothing: the role was not created
    with pg.engine.connect() as conn:
        assert (
            conn.exec_driver_sql("SELECT count(*) FROM pg_roles WHERE rolname = 'tl_printed'").scalar() == 0
        )


def test_grant_reader_bad_role_is_one_line(pg: History) -> None:
    where = ["--db", pg.location.db_url]
    line = one_line_error(tilelens_in_process(*where, "db", "grant-reader", 'x"; DROP TABLE runs; --'))
    assert line.startswith("tilelens: error: role name ")


def test_a_url_naming_the_reader_role_reads_with_the_servers_own_refusals(
    pg: History, postgres_server: PostgresServer
) -> None:
    where = ["--db", pg.location.db_url, "--blobs", str(pg.location.blobs_dir)]
    result = tilelens_in_process(*where, "db", "grant-reader", "tl_reader", "--apply")
    assert result.returncode == 0, result.stderr
    database = postgres_connect_args(pg.location.db_url)["dbname"]
    reader_url = postgres_server.url(database, user="tl_reader")
    shown = tilelens_in_process(
        "--db", reader_url, "sql", "SELECT count(*) AS n FROM launch_overview", "--format", "json"
    )
    assert shown.returncode == 0, shown.stderr
    assert '"n": 1' in shown.stdout
    assert (
        tilelens_in_process("--db", reader_url, "--blobs", str(pg.location.blobs_dir), "ls").returncode == 0
    )
    # Past the gate, the server itself: this role may read the history's tables and nothing else.
    raw = libpq.Connection(postgres_connect_args(reader_url))
    try:
        assert raw.scalar("SELECT current_user") == "tl_reader"
        for statement in (
            "SELECT pg_read_file('/etc/hostname')",
            "SELECT pg_ls_dir('/')",
            "INSERT INTO runs (argv) VALUES ('[]')",
            "DELETE FROM runs",
            "CREATE TABLE mine (x int)",
            "SELECT * FROM pg_authid",
            "SELECT lo_import('/etc/hostname')",
        ):
            with pytest.raises(libpq.LibpqError, match="permission denied"):
                raw.run(statement).clear()
    finally:
        raw.close()
    # the gate still stands in front of it
    reader_location = resolve_location(reader_url, pg.location.blobs_dir, env={})
    with open_reader(reader_location) as r, pytest.raises(ReadOnlyError):
        r.execute("SELECT pg_sleep(5)")
    assert pg.counts()["runs"] == 1


def test_pglast_is_what_the_postgres_extra_installs() -> None:
    """The parser gate needs pglast wherever PostgreSQL is read: it is in the postgres and dev extras."""
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    postgres = next(line for line in text.splitlines() if line.startswith("postgres = "))
    assert "pglast" in postgres
    assert subprocess.run([sys.executable, "-c", "import pglast"], check=False).returncode == 0
