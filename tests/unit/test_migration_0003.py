"""Migration 0003: out-of-bounds counts split by op, dropped lanes, storage sizes; down and up again."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from tests import store_helpers
from tilelens.config import resolve_location
from tilelens.records import AccessSummary
from tilelens.store import History
from tilelens.store.read.query import open_query

REPO = Path(__file__).resolve().parents[2]


def _columns(h: History, table: str) -> set[str]:
    with h.engine.connect() as conn:
        return {c["name"] for c in sa.inspect(conn).get_columns(table)}


def test_down_to_0002_and_up_again_keeps_launches_and_leaves_their_split_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "h.db"
    monkeypatch.setenv("TILELENS_DB", str(db))
    monkeypatch.setenv("TILELENS_BLOBS", str(tmp_path / "blobs"))
    with History.open(location=resolve_location()) as h:
        run = h.begin_run(store_helpers.run_info())
        rec = store_helpers.launch()
        rec.summary = AccessSummary(load_lanes=16, store_lanes=16, oob_lanes=5, oob_load_lanes=3,
                                    oob_store_lanes=2, dropped_lanes=1, events=8, lanes=32)  # fmt: skip
        rec.args[0].storage_bytes = 4096
        first = h.write_launch(run, rec)
    with open_query(str(db)) as q:
        (row,) = q.launches()
        assert (row.oob_lanes, row.oob_load_lanes, row.oob_store_lanes, row.dropped_lanes) == (5, 3, 2, 1)
        assert q.sql("SELECT storage_bytes FROM launch_args WHERE position = 0").rows == [(4096,)]
        assert q.sql("SELECT dropped_lanes FROM oob_launches").rows == [(1,)]

    cfg = Config(str(REPO / "alembic.ini"))
    command.downgrade(cfg, "0002")
    with open_query(str(db)) as q:  # reading never migrates: a 0002 history reads with the split unknown
        assert q.reader.revisions == ("0002",)
        (row,) = q.launches(oob=True)
        assert (row.id, row.oob_lanes, row.oob_load_lanes, row.oob_store_lanes, row.dropped_lanes) == (
            first,
            5,
            None,
            None,
            None,
        )
        detail = q.launch(first)
        assert detail.summary["oob_lanes"] == 5 and detail.summary["dropped_lanes"] is None
        # The downgrade dropped columns in place: no launch or argument row went with them.
        assert q.sql(f"SELECT count(*) FROM launch_args WHERE launch_id = {first}").rows == [(len(rec.args),)]
    with History.open(location=resolve_location(), script_location=None) as h:  # upgraded again on open
        assert h.migrated_from == ("0002",)
        assert {"oob_load_lanes", "oob_store_lanes", "dropped_lanes"} <= _columns(h, "launches")
        assert "storage_bytes" in _columns(h, "launch_args")
        second = h.write_launch(h.begin_run(store_helpers.run_info()), rec)
    with open_query(str(db)) as q:
        rows = {r.id: r for r in q.launches()}
        # Written before the split existed (the downgrade dropped it): unknown, not zero.
        old = rows[first]
        assert (old.oob_lanes, old.oob_load_lanes, old.dropped_lanes) == (5, None, None)
        assert (rows[second].oob_load_lanes, rows[second].dropped_lanes) == (3, 1)
        got = q.sql("SELECT launch_id, oob_lanes, oob_store_lanes FROM oob_launches ORDER BY launch_id").rows
        assert got == [(first, 5, None), (second, 5, 2)]
        assert q.sql("SELECT oob_lanes FROM run_overview ORDER BY run_id").rows == [(5,), (5,)]
        detail = q.launch(first)
        assert detail.summary["oob_lanes"] == 5 and detail.summary["oob_load_lanes"] is None
