"""Runs whose recording process died unfinished are told apart from live ones, shown and stored as ``lost``."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests import store_helpers
from tests.end_to_end.conftest import tilelens_in_process
from tests.postgres import PostgresServer
from tilelens.api import open_query
from tilelens.config import Location, resolve_location
from tilelens.store import History
from tilelens.store.sql import liveness as lv
from tilelens.store.sql.models import Run


def _exited_pid() -> int:
    """The pid of a process that has exited and been reaped (nothing lives under it now, almost surely)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_this_process_is_alive_and_identified() -> None:
    me = lv.current_process()
    assert me.host == socket.gethostname()
    assert lv.liveness(me) == "alive"
    if Path("/proc/self/stat").exists():
        assert me.start is not None and me.start > 0
        assert me.boot_id is not None and me.pid_ns is not None and me.pid_ns.startswith("pid:[")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_decisions() -> None:
    me = lv.current_process()
    assert me.start is not None
    assert lv.liveness(dataclasses.replace(me, start=me.start + 1)) == "gone"  # pid reused by another process
    assert lv.liveness(dataclasses.replace(me, pid=_exited_pid())) == "gone"
    assert lv.liveness(dataclasses.replace(me, boot_id="another-boot")) == "gone"  # rebooted since
    assert lv.liveness(dataclasses.replace(me, host="elsewhere", start=me.start + 1)) == "unknown"
    assert lv.liveness(dataclasses.replace(me, pid_ns="pid:[1]", start=me.start + 1)) == "unknown"
    # A run from before schema 0004 (no start time): gone only when no process has its pid.
    legacy = dataclasses.replace(me, start=None, boot_id=None, pid_ns=None)
    assert lv.liveness(legacy) == "unknown"
    assert lv.liveness(dataclasses.replace(legacy, pid=_exited_pid())) == "gone"
    assert lv.effective_status("ok", me.host, _exited_pid(), 1, me.boot_id, me.pid_ns) == "ok"
    assert lv.effective_status("running", me.host, me.pid, me.start, me.boot_id, me.pid_ns) == "running"
    assert lv.effective_status("running", me.host, me.pid, me.start + 1, me.boot_id, me.pid_ns) == "lost"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_an_unreaped_child_is_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    stat = Path(f"/proc/{proc.pid}/stat")
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":  # exited, its parent not told yet
        time.sleep(0.01)
    try:
        recorded = dataclasses.replace(lv.current_process(), pid=proc.pid, start=lv._stat(proc.pid)[1])  # type: ignore[index]
        assert lv.liveness(recorded) == "gone"
    finally:
        proc.wait()


def _run(h: History, **identity: object) -> int:
    """A run of this host, with its process identity overwritten."""
    info = store_helpers.run_info()
    info.host = socket.gethostname()
    run = h.begin_run(info)
    if identity:
        with h.session(write=True) as s:
            s.execute(sa.update(Run).where(Run.id == run).values(**identity))
    return run


def _statuses(location: Location) -> dict[int, str]:
    engine = sa.create_engine(location.db_url)
    try:
        with engine.connect() as conn:
            return dict(conn.execute(sa.text("SELECT id, status FROM runs")).fetchall())
    finally:
        engine.dispose()


def test_dead_runs_show_as_lost_and_the_next_writer_stores_it(history_location: Location) -> None:
    me = lv.current_process()
    with History.open(location=history_location) as h:
        alive = _run(h)  # this process: alive
        killed = _run(h, pid=_exited_pid())
        reused = (
            _run(h, pid_start=(me.start or 0) + 1) if me.start is not None else _run(h, pid=_exited_pid())
        )
        other_host = _run(h, host="elsewhere", pid=_exited_pid())
        finished = _run(h, pid=_exited_pid())
        h.finish_run(finished, "ok", 0)
        legacy = _run(h, pid=_exited_pid(), pid_start=None, boot_id=None, pid_ns=None)
    stored = {alive: "running", killed: "running", reused: "running", other_host: "running", finished: "ok"}
    stored[legacy] = "running"
    lost = {killed, reused, legacy}

    # Readers show it at once, and write nothing (SQLite: not a byte of the file; either: not a row).
    engine = sa.create_engine(history_location.db_url)
    rows_before = store_helpers.dump_rows(engine)
    path = history_location.sqlite_path
    before = path.read_bytes() if path is not None else None
    with open_query(location=history_location) as q:
        shown = {r.id: r.status for r in q.runs()}
        assert {r.id for r in q.runs(status="lost")} == lost
        assert {r.id for r in q.runs(status="running")} == {alive, other_host}
        assert {r.id for r in q.runs(status="running", limit=1)} == {other_host}  # newest first, after filter
    assert shown == {**stored, **{i: "lost" for i in lost}}
    assert _statuses(history_location) == stored
    out = tilelens_in_process("--db", history_location.db_url, "ls", "--runs", "--json")
    assert {r["id"]: r["status"] for r in json.loads(out.stdout)} == shown
    assert store_helpers.dump_rows(engine) == rows_before
    engine.dispose()
    if path is not None:
        assert path.read_bytes() == before

    # The next writer stores it; the view then agrees.
    with History.open(location=history_location) as h:
        assert h.repair_lost_runs() == []  # already done by open
        with h.engine.connect() as conn:
            view = dict(conn.execute(sa.text("SELECT run_id, status FROM run_overview")).fetchall())
    assert _statuses(history_location) == shown == view


def test_every_sql_surface_reads_lost_as_ls_does_and_writes_nothing(history_location: Location) -> None:
    from starlette.testclient import TestClient

    from tilelens.web.app import create_app

    with History.open(location=history_location) as h:
        alive = _run(h, tag="alive")
        killed = _run(h, pid=_exited_pid(), tag="killed")
        finished = _run(h, pid=_exited_pid(), tag="finished")
        h.finish_run(finished, "ok", 0)
        elsewhere = _run(h, host="elsewhere", pid=_exited_pid(), tag="elsewhere")
    want = [(alive, "running"), (killed, "lost"), (finished, "ok"), (elsewhere, "running")]
    engine = sa.create_engine(history_location.db_url)
    rows_before = store_helpers.dump_rows(engine)
    path = history_location.sqlite_path
    before = path.read_bytes() if path is not None else None

    out = tilelens_in_process("--db", history_location.db_url, "ls", "--runs", "--json")
    assert sorted((r["id"], r["status"]) for r in json.loads(out.stdout)) == want
    out = tilelens_in_process(
        "--db", history_location.db_url, "sql", "SELECT id, status FROM runs ORDER BY id", "--format", "csv"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["id,status", *(f"{i},{s}" for i, s in want)]
    with open_query(location=history_location) as q:
        assert q.sql("SELECT id, status FROM runs ORDER BY id").rows == want
        assert q.sql("SELECT run_id, status FROM run_overview ORDER BY run_id").rows == want
        assert q.sql("SELECT r.id FROM runs AS r WHERE r.status = 'lost'").rows == [(killed,)]
        assert q.sql("SELECT count(*) FROM run_overview WHERE status = 'running'").rows == [(2,)]
        assert q.sql(f"SELECT runs.status FROM runs WHERE runs.id = {killed}").rows == [("lost",)]
        assert (
            q.sql(
                "SELECT o.run_id FROM run_overview o JOIN runs r ON r.id = o.run_id WHERE o.status <> r.status"
            ).rows
            == []
        )
        assert q.sql(  # in a subquery and an EXISTS too
            "SELECT tag FROM (SELECT * FROM runs) AS x WHERE EXISTS "
            "(SELECT 1 FROM run_overview o WHERE o.run_id = x.id AND o.status = 'lost')"
        ).rows == [("killed",)]
        # The statement's own CTE of that name is its own; the stored rows stay readable, qualified by schema
        # on SQLite (where the TEMP views shadow them) and as they are in the history's tables.
        assert q.sql("WITH runs AS (SELECT 7 AS id, 'mine' AS status) SELECT id, status FROM runs").rows == [
            (7, "mine")
        ]
        if path is not None:
            assert q.sql(f"SELECT status FROM main.runs WHERE id = {killed}").rows == [("running",)]
        else:
            assert q.sql(f"SELECT public.runs.status FROM public.runs WHERE id = {killed}").rows == [
                ("lost",)
            ]
        # `tilelens tables` describes the stored table: the same columns and types as before.
        runs_info = next(t for t in q.tables() if t.name == "runs")
        assert runs_info.kind == "table"
        status_type = "varchar(16)" if path is not None else "character varying"
        assert {c.name: c.type for c in runs_info.columns}["status"] == status_type
    page = TestClient(create_app(history_location), base_url="http://127.0.0.1:8765").get("/").text
    assert f'<a href="/runs/{killed}">{killed}</a>' in page
    assert page.split(f'<a href="/runs/{killed}">', 1)[1].split("</tr>", 1)[0].count("<td>lost</td>") == 1

    assert store_helpers.dump_rows(engine) == rows_before
    assert _statuses(history_location) == {
        alive: "running",
        killed: "running",
        finished: "ok",
        elsewhere: "running",
    }
    engine.dispose()
    if path is not None:
        assert path.read_bytes() == before


def test_a_postgresql_reader_role_reads_lost_too(postgres_server: PostgresServer, tmp_path: Path) -> None:
    """The reader of ``db grant-reader`` may create nothing, not even a temporary object: the gate's rewrite
    needs no more than SELECT on the history's tables."""
    from tilelens.store.sql.urls import postgres_connect_args

    location = resolve_location(postgres_server.url(postgres_server.create_database()), tmp_path, env={})
    with History.open(location=location) as h:
        killed = _run(h, pid=_exited_pid())
        alive = _run(h)
    granted = tilelens_in_process("--db", location.db_url, "db", "grant-reader", "tl_lost_reader", "--apply")
    assert granted.returncode == 0, granted.stderr
    database = postgres_connect_args(location.db_url)["dbname"]
    reader = postgres_server.url(database, user="tl_lost_reader")
    for view, key in (("runs", "id"), ("run_overview", "run_id")):
        out = tilelens_in_process(
            "--db", reader, "sql", f"SELECT {key}, status FROM {view} ORDER BY 1", "--format", "csv"
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [f"{key},status", f"{killed},lost", f"{alive},running"]
    assert _statuses(location) == {killed: "running", alive: "running"}


def test_a_lost_run_that_finishes_after_all_keeps_its_own_status(history: History) -> None:
    run = _run(history, pid=_exited_pid())
    assert history.repair_lost_runs() == [run]
    history.finish_run(run, "ok", 0)
    with history.session() as s:
        assert s.get(Run, run).status == "ok"  # type: ignore[union-attr]


def test_a_recording_tree_closes_only_its_own_gone_children(history: History) -> None:
    from tilelens.store.admin.tree import close_lost_children

    root = _run(history)  # the ending recording: this process
    gone = _run(history, pid=_exited_pid(), parent_run_id=root)
    alive = _run(history, parent_run_id=root)  # a live child (this process stands in for it)
    grandchild = _run(history, pid=_exited_pid(), parent_run_id=alive)
    finished = _run(history, pid=_exited_pid(), parent_run_id=root)
    history.finish_run(finished, "failed", 3)
    elsewhere = _run(history, host="elsewhere", pid=_exited_pid(), parent_run_id=root)
    stranger = _run(history, pid=_exited_pid())  # gone too, but another tree: the next open's to repair
    assert close_lost_children(history, root) == [gone, grandchild]
    with history.session() as s:
        statuses = {r.id: (r.status, r.exit_code) for r in s.scalars(sa.select(Run))}
    assert statuses == {
        root: ("running", None),
        gone: ("lost", None),
        alive: ("running", None),
        grandchild: ("lost", None),
        finished: ("failed", 3),
        elsewhere: ("running", None),
        stranger: ("running", None),
    }
    assert close_lost_children(history, root) == []  # nothing left to close
