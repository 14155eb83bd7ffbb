"""``seq`` is unique in its run: the schema refuses a duplicate, the store gives the next free one instead."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import select

from tests import store_helpers
from tilelens.config import Location
from tilelens.store import History
from tilelens.store.sql import database
from tilelens.store.sql.models import Launch


@pytest.fixture
def history_url(tmp_path: Path) -> str:
    """SQLite only: these tests check SQLite's own behaviour (its constraint message, the file)."""
    return str(tmp_path / "history" / "tilelens.db")


def _seqs(h: History, run: int) -> list[tuple[int, int]]:
    with h.session() as s:
        return [
            tuple(r)
            for r in s.execute(select(Launch.id, Launch.seq).where(Launch.run_id == run).order_by(Launch.id))
        ]


def test_a_taken_seq_becomes_the_next_free_one(history: History) -> None:
    run, other = history.begin_run(store_helpers.run_info()), history.begin_run(store_helpers.run_info())
    recs = [store_helpers.launch(seq=s) for s in (0, 1, 1, 0, 7, 3)]  # e.g. a forked child counting again
    ids = [history.write_launch(run, rec) for rec in recs]
    assert [rec.seq for rec in recs] == [0, 1, 2, 3, 7, 8]  # what was stored, told back to the caller
    assert _seqs(history, run) == list(zip(ids, [0, 1, 2, 3, 7, 8]))
    other_id = history.write_launch(other, store_helpers.launch(seq=0))  # per run: 0 is free in another run
    assert _seqs(history, other) == [(other_id, 0)]


def test_the_schema_refuses_a_duplicate(history: History) -> None:
    run = history.begin_run(store_helpers.run_info())
    launch_id = history.write_launch(run, store_helpers.launch(seq=5))
    columns = [c.name for c in Launch.__table__.columns if c.name != "id"]
    copy = f"INSERT INTO launches ({', '.join(columns)}) SELECT {', '.join(columns)} FROM launches WHERE id = :id"
    with (
        pytest.raises(sa.exc.IntegrityError, match="UNIQUE constraint failed: launches.run_id, launches.seq"),
        history.session(write=True) as s,
    ):
        s.execute(sa.text(copy), {"id": launch_id})
    assert _seqs(history, run) == [(launch_id, 5)]


def test_migration_renumbers_runs_that_already_hold_duplicates(history_location: Location) -> None:
    with History.open(location=history_location) as h:
        run = h.begin_run(store_helpers.run_info())
        clean = h.begin_run(store_helpers.run_info())
        for seq in range(3):
            h.write_launch(run, store_helpers.launch(seq=seq))
        clean_ids = [h.write_launch(clean, store_helpers.launch(seq=seq)) for seq in (4, 9)]
    command.downgrade(database.alembic_config(history_location.db_url), "0002")
    path = history_location.sqlite_path
    assert path is not None
    with sqlite3.connect(path) as conn:  # what a writer before 0004 could leave: seq 0, 1, 2 twice in run 1
        columns = [r[1] for r in conn.execute("PRAGMA table_info(launches)") if r[1] != "id"]
        conn.execute(
            f"INSERT INTO launches ({', '.join(columns)}) SELECT {', '.join(columns)} FROM launches "
            f"WHERE run_id = {run} ORDER BY id"
        )
        rows = conn.execute(f"SELECT id, seq FROM launches WHERE run_id = {run} ORDER BY id").fetchall()
    assert [seq for _, seq in rows] == [0, 1, 2, 0, 1, 2]
    ids = [i for i, _ in rows]
    with History.open(location=history_location) as h:
        assert h.migrated_from == ("0002",)
        # Ordered by (seq, id): the first 0, its copy, the first 1, ...
        expected = {ids[0]: 0, ids[3]: 1, ids[1]: 2, ids[4]: 3, ids[2]: 4, ids[5]: 5}
        assert dict(_seqs(h, run)) == expected
        assert _seqs(h, clean) == list(zip(clean_ids, [4, 9]))  # runs without duplicates are untouched
        with h.engine.connect() as conn:
            indexes = {i["name"]: i for i in sa.inspect(conn).get_indexes("launches")}
        assert indexes["uq_launches_run_id_seq"]["unique"]
        assert indexes["uq_launches_run_id_seq"]["column_names"] == ["run_id", "seq"]
        assert "ix_launches_run_id_seq" not in indexes
