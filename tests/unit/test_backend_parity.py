"""SQLite and PostgreSQL behave the same: migrations, views, JSON columns, timestamps, read output, errors.

The same records go into a SQLite history and a PostgreSQL one; every read (the documented queries, the
tables, ``ls``/``show --json``) must give the same answer from both, value for value.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import sqlalchemy as sa
import torch
from alembic import command

from tests import store_helpers
from tests.conftest import new_history_url
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tests.end_to_end.test_cli_sql import documented_queries
from tests.postgres import PASSWORD, PASSWORD_ROLE, PostgresServer
from tilelens.config import resolve_location
from tilelens.core.engine.access import AccessCollector
from tilelens.core.kernel.spans import ArgSpan, SpanTable
from tilelens.store import History
from tilelens.store.sql import database
from tilelens.store.sql.models import Run
from tilelens.store.sql.readonly import open_reader

T0 = dt.datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=dt.timezone(dt.timedelta(hours=-5)))  # not UTC
AWKWARD = {"nan": float("nan"), "inf": float("-inf"), "unicode": "λ\u2028", "nested": {"z": [1, 2.5, None]}}


def _trace() -> pa.Table:
    """A trace as the recorder writes it: an affine load of 16 lanes, 4 of them out of bounds."""
    collector = AccessCollector(SpanTable([ArgSpan(0, 4096, 4096 + 48, 4)]))
    collector.record("load", np.arange(4096, 4096 + 64, 4, dtype=np.uint64), None, 4, (0, 0, 0))
    return collector.finish()


def _fill(h: History) -> None:
    """The same history on any backend: fixed times, awkward JSON, an autotune event, a replay."""
    run = h.begin_run(dataclasses.replace(store_helpers.run_info(tag="parity"), started_at=T0))
    gen = torch.Generator().manual_seed(0)
    ids = []
    for i in range(3):
        rec = store_helpers.launch(
            torch.randn(16, generator=gen), seq=i, trace=_trace(),
            config={"BLOCK": 4 << i, **AWKWARD}, started_at=T0 + dt.timedelta(microseconds=i),
            tuning_key="(1024,)" if i else None,
        )  # fmt: skip
        ids.append(h.write_launch(run, rec))
    event = dataclasses.replace(store_helpers.autotune_event(), created_at=T0)
    h.write_autotune_event(run, event, ids[1])
    h.write_autotune_event(run, event, ids[2])
    h.write_replay(
        ids[0], outcome="match", device="cpu", backend="interpreter", trace_equal=True, created_at=T0
    )
    h.finish_run(run, "ok", 0)
    with h.engine.begin() as conn:  # finish_run stamps "now"; pin it so both histories agree
        conn.execute(sa.update(Run).values(finished_at=T0 + dt.timedelta(seconds=5)))
        conn.execute(sa.text("UPDATE launches SET created_at = :t"), {"t": T0.astimezone(dt.timezone.utc)})
        conn.execute(sa.text("UPDATE launches SET oob_lanes = 4 WHERE seq = 2"))  # as its trace says


@pytest.fixture
def both(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, History]:
    histories = {}
    for backend in ("sqlite", "postgresql"):
        folder = tmp_path / backend
        url = new_history_url(backend, folder, request)
        histories[backend] = History.open(location=resolve_location(url, folder / "blobs", env={}))
        _fill(histories[backend])
    yield histories
    for h in histories.values():
        h.close()


QUERIES = [
    *documented_queries(),
    "SELECT * FROM launch_overview ORDER BY launch_id",
    "SELECT * FROM autotune_choices ORDER BY event_id",
    "SELECT * FROM run_overview",
    "SELECT id, argv, versions, started_at, finished_at, status, exit_code, tag FROM runs",
    "SELECT id, config, unattributed, started_at, trace_blob, trace_rows FROM launches ORDER BY id",
    "SELECT launch_id, position, shape, strides, value, access, before_blob, after_blob FROM launch_args "
    "ORDER BY launch_id, position",
    "SELECT id, configs, timings, chosen, cache_hit, created_at FROM autotune_events ORDER BY id",
    "SELECT id, outcome, trace_equal, max_abs_err, created_at FROM replays",
    "SELECT sha256, kind, size, rows FROM blobs ORDER BY sha256",
    "SELECT avg(duration_s) > 0 AS positive, sum(lanes) AS lanes, count(DISTINCT config) AS configs FROM launch_overview",
]


@pytest.mark.parametrize("query", QUERIES)
def test_every_read_gives_the_same_values(both: dict[str, History], query: str) -> None:
    answers = {}
    for backend, h in both.items():
        with open_reader(h.location) as r:
            result = r.execute(query)
        answers[backend] = (result.columns, result.rows)
    assert answers["sqlite"] == answers["postgresql"]
    assert answers["sqlite"][1] or "HAVING" in query or "error" in query  # the comparison is not of nothing


def test_json_and_times_round_trip_alike(both: dict[str, History]) -> None:
    for h in both.values():
        with h.session() as s:
            run = s.scalars(sa.select(Run)).one()
            assert run.started_at == T0 and run.started_at.tzinfo == dt.timezone.utc
            (config,) = s.execute(sa.text("SELECT config FROM launches WHERE seq = 0")).one()
        stored = json.loads(config) if isinstance(config, str) else config
        assert stored["nan"] == {"$float": "nan"} and stored["unicode"] == "λ\u2028"
        with open_reader(h.location) as r:
            ((started,),) = r.execute("SELECT started_at FROM runs").rows
        assert started == "2026-03-01 17:00:00.250000"  # UTC text, microseconds kept


@pytest.mark.parametrize(
    "command_line", [["ls", "--json"], ["ls", "--runs", "--json"], ["show", "2", "--json"]]
)
def test_ls_and_show_print_the_same(both: dict[str, History], command_line: list[str]) -> None:
    outputs = {}
    for backend, h in both.items():
        out = tilelens_in_process("--db", h.location.db_url, "--blobs", h.location.blobs_dir, *command_line)
        assert out.returncode == 0, out.stderr
        outputs[backend] = json.loads(out.stdout)
    assert outputs["sqlite"] == outputs["postgresql"]


def test_migrations_go_down_and_up_again(history: History) -> None:
    """Every revision's downgrade and upgrade run on each backend, and the data survives the round."""
    run = history.begin_run(store_helpers.run_info())
    history.write_launch(run, store_helpers.launch())
    with history.engine.begin() as conn:
        command.downgrade(database.alembic_config(connection=conn), "0008")  # before runs.uuid
    with history.engine.connect() as conn:
        assert "uuid" not in {c["name"] for c in sa.inspect(conn).get_columns("runs")}
    with history.engine.begin() as conn:
        command.upgrade(database.alembic_config(connection=conn), "heads")
    assert history.revision() == tuple(database.script_heads())
    with open_reader(history.location) as r:
        assert r.execute("SELECT count(*) FROM launch_overview").rows == [(1,)]
        assert r.execute("SELECT count(*) FROM runs WHERE uuid IS NOT NULL").rows == [(1,)]
        assert r.execute("SELECT count(DISTINCT config) FROM launch_overview").rows == [(1,)]


# -- connection errors: one line, exit 2, no password, on every command ---------------------------------------

COMMANDS = [
    ["ls"],
    ["ls", "--runs"],
    ["show", "1"],
    ["sql", "SELECT 1"],
    ["db", "upgrade"],
    ["db", "current"],
]


@pytest.mark.parametrize("command_line", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("failure", ["server down", "wrong password", "missing database"])
def test_connection_failures_are_one_line(
    postgres_server: PostgresServer, tmp_path: Path, failure: str, command_line: list[str]
) -> None:
    if failure == "server down":
        url = f"postgresql+psycopg://postgres@/tl?host={tmp_path}"  # a folder with no server's socket
        expected = "cannot connect to history database"
    elif failure == "wrong password":
        url = postgres_server.url("postgres", user=PASSWORD_ROLE, password="not-" + PASSWORD)
        expected = f'password authentication failed for user "{PASSWORD_ROLE}"'
    else:
        url = postgres_server.url("no_such_database")
        expected = "database 'no_such_database' does not exist"
    out = tilelens_in_process("--db", url, "--blobs", tmp_path / "blobs", *command_line)
    if failure == "missing database" and command_line == ["db", "current"]:
        assert out.returncode == 0 and "no history here yet" in out.stdout  # as for a missing SQLite file
        return
    line = one_line_error(out)
    assert expected in line and PASSWORD not in line and "not-" not in line
    if failure == "wrong password":
        assert ":***@" in line


def test_the_right_password_works(postgres_server: PostgresServer, tmp_path: Path) -> None:
    url = postgres_server.url(postgres_server.create_database(), user=PASSWORD_ROLE, password=PASSWORD)
    assert tilelens_in_process("--db", url, "--blobs", tmp_path, "db", "upgrade").returncode == 0
    out = tilelens_in_process("--db", url, "--blobs", tmp_path, "ls", "--json")
    assert (out.returncode, json.loads(out.stdout)) == (0, [])
