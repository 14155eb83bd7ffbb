"""Expected failures below the store come out as TileLens errors that name the history, the blob or the file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from sqlalchemy import select

from tests import store_helpers
from tilelens.cli import main
from tilelens.core.engine.access import AccessCollector
from tilelens.core.kernel.spans import ArgSpan, SpanTable
from tilelens.errors import BlobError, HistoryError
from tilelens.store import History
from tilelens.store.read.launches import newest_run, select_launches
from tilelens.store.sql import database
from tilelens.store.sql.models import Launch, Run


def test_a_locked_database_is_a_history_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database, "BUSY_TIMEOUT_S", 0.05)
    db = tmp_path / "h.db"
    with History.open(str(db), tmp_path / "blobs") as h:
        h.begin_run(store_helpers.run_info())
        h.engine.dispose()  # WAL readers never wait for a writer: take the whole file instead
        locker = sqlite3.connect(db, isolation_level=None)
        assert locker.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
        locker.execute("BEGIN EXCLUSIVE")
        try:
            with pytest.raises(HistoryError, match=f"cannot write history database {db}: database is locked"):
                h.begin_run(store_helpers.run_info())
            with (
                pytest.raises(HistoryError, match=f"cannot use history database {db}: database is locked"),
                h.session() as s,
            ):
                s.execute(select(Run.id)).all()
            with pytest.raises(HistoryError, match="database is locked"):
                newest_run(h)
            with pytest.raises(HistoryError, match="database is locked"):
                select_launches(h, kernel="*")
        finally:
            locker.rollback()
            locker.close()
        assert newest_run(h) == 1


def test_an_unreadable_blob_is_a_blob_error(history: History) -> None:
    run = history.begin_run(store_helpers.run_info())
    launch = history.write_launch(run, store_helpers.launch(trace=store_helpers.trace_table()))
    with history.session() as s:
        sha = s.get(Launch, launch).trace_blob
    path = history.blobs.path(sha)
    path.chmod(0o644)
    path.unlink()
    path.mkdir()  # reading it fails with an OSError that is not "missing"
    with pytest.raises(BlobError, match=f"blob {sha} cannot be read"):
        history.blobs.get_bytes(sha)


def test_export_to_a_file_that_cannot_be_written(
    history: History, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = history.begin_run(store_helpers.run_info())
    launch = history.write_launch(run, store_helpers.launch(trace=_real_trace()))
    target = tmp_path / ("x" * 300 + ".csv")  # longer than any file system allows a name to be
    location = ["--db", history.location.db_url, "--blobs", str(history.location.blobs_dir)]
    code = main([*location, "export", str(launch), "--format", "csv", "-o", str(target)])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.startswith(f"tilelens: error: cannot write {target}: ")
    assert len(err.splitlines()) == 1 and "File name too long" in err
    assert list(tmp_path.iterdir()) == [tmp_path / "history"]


def _real_trace() -> pa.Table:
    """A trace as the recorder writes it: one affine load of 16 lanes."""
    collector = AccessCollector(SpanTable([ArgSpan(0, 4096, 4096 + 64, 4)]))
    collector.record("load", np.arange(4096, 4096 + 64, 4, dtype=np.uint64), None, 4, (0, 0, 0))
    return collector.finish()
