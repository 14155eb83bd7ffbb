"""A launch's rows through the sqlite3 cursor (tilelens.store.write.rowsql) are the rows the Core path writes."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import torch

from tests import store_helpers
from tilelens.store import History, HistoryError
from tilelens.store.write import history as history_module
from tilelens.store.write import rows as rows_module

FIXED = dt.datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=dt.timezone.utc)


def _raw_rows(db: Path, table: str, where: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Every column as SQLite holds it: its storage class and its value."""
    with sqlite3.connect(db) as conn:
        cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
        picked = ", ".join(f'typeof("{c}"), "{c}"' for c in cols if c not in ("id", "launch_id", "seq"))
        return conn.execute(f'SELECT {picked} FROM "{table}" WHERE {where} ORDER BY 1, 2', args).fetchall()


def _record(x: torch.Tensor, out: torch.Tensor, seq: int) -> Any:
    trace = store_helpers.trace_table(12)
    rec = store_helpers.launch(
        x,
        torch.zeros_like(out),
        out,
        trace=trace,
        seq=seq,
        config={"BLOCK": 4, "engine": {"mode": "batched"}},
    )
    rec.started_at = FIXED
    rec.test_nodeid = "tests/x.py::t"
    return rec


def test_the_cursor_path_stores_exactly_what_the_core_path_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_module, "utcnow", lambda: FIXED)
    monkeypatch.setattr(rows_module, "utcnow", lambda: FIXED)  # where the launch and blob rows are built
    used: list[int] = []
    real = history_module.LaunchWriter.write
    monkeypatch.setattr(
        history_module.LaunchWriter, "write", lambda self, *a: used.append(real(self, *a)) or used[-1]
    )
    with History.open(db=str(tmp_path / "h.db"), blobs=str(tmp_path / "blobs")) as h:
        run = h.begin_run(store_helpers.run_info())
        x, out = torch.randn(64), torch.randn(64).abs()
        first = h.write_launch(run, _record(x, out, 0))  # a new kernel row: the Core path
        assert h.cursor_writer is not None
        fast = h.write_launch(run, _record(x, out, 1))  # the cursor path
        rows, h.cursor_writer = h.cursor_writer, None
        core = h.write_launch(run, _record(x, out, 2))  # the Core path again, for comparison
        h.cursor_writer = rows
    assert used == [fast]  # the first launch's kernel row was new: the Core path wrote it
    db = tmp_path / "h.db"
    for table, column in (("launches", "id"), ("launch_args", "launch_id")):
        fast_rows = _raw_rows(db, table, f"{column} = ?", (fast,))
        assert fast_rows and fast_rows == _raw_rows(db, table, f"{column} = ?", (core,))
        assert fast_rows == _raw_rows(db, table, f"{column} = ?", (first,))
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT seq FROM launches ORDER BY id").fetchall() == [(0,), (1,), (2,)]
        # JSON None is SQL NULL on both paths; timestamps are text in SQLAlchemy's form.
        assert conn.execute(
            "SELECT COUNT(*) FROM launch_args WHERE value IS NULL AND kind = 'tensor'"
        ).fetchone() == (6,)
        assert {r[0] for r in conn.execute("SELECT typeof(started_at) FROM launches")} == {"text"}


def test_a_taken_seq_falls_back_to_the_core_path_and_its_retry(tmp_path: Path) -> None:
    with History.open(db=str(tmp_path / "h.db"), blobs=str(tmp_path / "blobs")) as h:
        run = h.begin_run(store_helpers.run_info())
        x, out = torch.randn(8), torch.randn(8)
        h.write_launch(run, _record(x, out, 0))
        h.write_launch(run, _record(x, out, 1))
        again = _record(x, out, 1)  # a forked child counting from its parent's number
        launch_id = h.write_launch(run, again)
        assert again.seq == 2
    with sqlite3.connect(tmp_path / "h.db") as conn:
        assert conn.execute("SELECT id, seq FROM launches ORDER BY id").fetchall()[-1] == (launch_id, 2)
        assert conn.execute("SELECT COUNT(*) FROM launch_args").fetchone() == (12,)


def test_a_locked_database_is_one_history_error_and_nothing_half_written(tmp_path: Path) -> None:
    with History.open(db=str(tmp_path / "h.db"), blobs=str(tmp_path / "blobs")) as h:
        run = h.begin_run(store_helpers.run_info())
        x, out = torch.randn(8), torch.randn(8)
        h.write_launch(run, _record(x, out, 0))
        blocker = sqlite3.connect(tmp_path / "h.db", isolation_level=None)
        blocker.execute("PRAGMA busy_timeout = 0")
        blocker.execute("BEGIN IMMEDIATE")
        try:
            assert h.cursor_writer is not None
            raw = h.engine.raw_connection()
            try:
                raw.driver_connection.execute("PRAGMA busy_timeout = 50")  # type: ignore[union-attr]
            finally:
                raw.close()
            with pytest.raises(HistoryError, match="cannot write history database .*locked"):
                h.write_launch(run, _record(x, out, 1))
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert h.write_launch(run, _record(x, out, 1)) > 0  # the connection was left usable
    with sqlite3.connect(tmp_path / "h.db") as conn:
        assert conn.execute("SELECT seq FROM launches ORDER BY id").fetchall() == [(0,), (1,)]


def test_replay_rows_are_the_same_on_both_paths(tmp_path: Path) -> None:
    with History.open(db=str(tmp_path / "h.db"), blobs=str(tmp_path / "blobs")) as h:
        run = h.begin_run(store_helpers.run_info())
        launch = h.write_launch(run, _record(torch.randn(8), torch.randn(8), 0))
        kwargs: dict[str, Any] = dict(
            outcome="mismatch",
            device="cpu",
            backend="interpreter",
            max_abs_err=float("nan"),
            max_rel_err=0.5,
            trace_equal=False,
            message="out_ptr: 3 elements differ",
            duration_s=0.25,
            versions={"triton": "3.8.0", "torch": None},
            created_at=FIXED,
        )
        fast = h.write_replay(launch, **kwargs)
        rows, h.cursor_writer = h.cursor_writer, None
        core = h.write_replay(launch, **kwargs)
        h.cursor_writer = rows
        assert rows is not None and fast != core
        with pytest.raises(Exception, match="FOREIGN KEY"):  # a refused row: the Core path's own error
            h.write_replay(launch + 100, **kwargs)
    db = tmp_path / "h.db"
    assert _raw_rows(db, "replays", "id = ?", (fast,)) == _raw_rows(db, "replays", "id = ?", (core,))
    assert _raw_rows(db, "replays", "id = ?", (fast,))


def test_a_launch_read_through_the_cursor_equals_the_core_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tilelens.errors import LaunchNotFoundError
    from tilelens.store.read import launches

    with History.open(db=str(tmp_path / "h.db"), blobs=str(tmp_path / "blobs")) as h:
        run = h.begin_run(store_helpers.run_info())
        rec = _record(torch.randn(8).t(), torch.randn(8), 0)
        rec.args[2].value = {"$float": "inf"}  # a tagged JSON value comes back as stored
        launch_id = h.write_launch(run, rec)
        fast = launches.load_launch(h, launch_id)
        with pytest.raises(LaunchNotFoundError):
            launches.load_launch(h, launch_id + 1)
        monkeypatch.setattr(launches, "is_sqlite", lambda engine: False)
        core = launches.load_launch(h, launch_id)
    assert fast == core
    assert fast.config == {"BLOCK": 4, "engine": {"mode": "batched"}} and fast.args[2].value == {
        "$float": "inf"
    }
    assert [a.shape for a in fast.args] == [(8,), (8,), None, None] and fast.grid == (4, 1, 1)
