"""A writer killed mid-transaction leaves a hot ``-journal``: the next writer rolls it back, a reader says what is
wrong and what fixes it (issue 47, point 8: such a history failed "attempt to write a readonly database" for
every command, forever)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import store_helpers
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tilelens.config import resolve_location
from tilelens.store import History

# A writer that dies by SIGKILL inside its transaction, after SQLite has written the original pages to the
# journal and changed pages to the database file (a page cache of one page spills at once): exactly what a
# kill during `db upgrade`'s migration or a `record`'s first write leaves.
KILLED_WRITER = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode = DELETE")
conn.execute("PRAGMA cache_size = 1")
conn.execute("BEGIN IMMEDIATE")
conn.execute("CREATE TABLE alembic_version_half (version_num VARCHAR(32) NOT NULL)")
conn.execute("CREATE TABLE junk (x BLOB)")
for _ in range(200):
    conn.execute("INSERT INTO junk VALUES (randomblob(4000))")
os.kill(os.getpid(), signal.SIGKILL)
"""


def _kill_a_writer(db: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(db)], check=False)
    assert proc.returncode == -9
    journal = Path(f"{db}-journal")
    assert journal.exists() and journal.stat().st_size > 0  # hot: the next open must roll it back


@pytest.mark.parametrize("fresh", [False, True], ids=["existing", "being-created"])
def test_a_hot_journal_is_rolled_back_by_the_next_writer(tmp_path: Path, fresh: bool) -> None:
    db = tmp_path / "h.db"
    where = ["--db", db, "--blobs", tmp_path / "blobs"]
    if not fresh:
        with History.open(location=resolve_location(str(db), tmp_path / "blobs", env={})) as h:
            run = h.begin_run(store_helpers.run_info(tag="kept"))
            h.write_launch(run, store_helpers.launch())
            h.finish_run(run, "ok", 0)
    _kill_a_writer(db)
    # A reader cannot roll it back: it says what is wrong and what fixes it, in one line.
    for command in (["ls"], ["db", "current"], ["sql", "SELECT 1"]):
        line = one_line_error(tilelens_in_process(*where, *command))
        assert "a writer was killed in the middle of a transaction" in line, line
        assert "h.db-journal" in line and "tilelens db upgrade" in line, line
    # A writer rolls it back and goes on; nothing committed before is lost, nothing half-written stays.
    res = tilelens_in_process(*where, "db", "upgrade")
    assert res.returncode == 0, res.stderr
    assert not Path(f"{db}-journal").exists() or Path(f"{db}-journal").stat().st_size == 0
    res = tilelens_in_process(*where, "sql", "SELECT count(*) FROM runs", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert ('"count(*)": 0' if fresh else '"count(*)": 1') in res.stdout
    res = tilelens_in_process(*where, "sql", "SELECT name FROM sqlite_master WHERE name = 'junk'")
    assert res.returncode == 0 and "junk" not in res.stdout  # the killed transaction is gone


def test_recording_into_a_wedged_history_rolls_it_back_first(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _kill_a_writer(db)
    with History.open(
        location=resolve_location(str(db), tmp_path / "blobs", env={})
    ) as h:  # what record does
        run = h.begin_run(store_helpers.run_info())
        h.finish_run(run, "ok", 0)
        assert h.counts()["runs"] == 1
