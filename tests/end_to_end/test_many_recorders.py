"""Many recorders, one history: separate processes record into one SQLite file or one PostgreSQL database
while readers run ``tilelens ls`` and ``tilelens sql``; every launch arrives once, nobody sees a lock error.

The full-size run (8 processes x 200 launches, launches/s for both backends) is a benchmark:
``python scripts/bench.py --many-recorders`` (numbers in BENCHMARKS.md).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.concurrency import run_concurrency


def test_four_recorders_and_readers_share_one_history(history_url: str, tmp_path: Path) -> None:
    result = run_concurrency(tmp_path / "work", processes=4, launches=25, db=history_url)
    assert result["exit_codes"] == [0, 0, 0, 0], result["worker_errors"]
    assert (result["expected"], result["present"], result["duplicates"]) == (100, 100, 0)
    assert result["complete_runs"]  # each run holds exactly its launches 0..24
    assert result["runs"] == ["ok"] * 4
    assert result["lock_errors"] == [] and result["read_failures"] == []
    assert result["reads"] >= 1  # the readers ran while the recorders did
    assert result["ok"]
