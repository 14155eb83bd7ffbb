"""``show`` of a launch with out-of-bounds lanes answers from ``launches.oob_sample`` (schema 0013).

The sample must be exactly what reading the trace gives (same events, same total), ``show`` must then not
import pyarrow, and a row without a sample (recorded before 0013) or one asked for more events than were kept
reads the trace as before.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.end_to_end.conftest import ROOT, Recorded, tilelens_in_process
from tilelens.store.files import lanes
from tilelens.store.files.oobsample import SAMPLE_EVENTS
from tilelens.store.read.query import open_query

SHOW_IMPORTS = """
import sys
from tilelens.cli import main
assert main(["--db", sys.argv[1], "--blobs", sys.argv[2], "show", sys.argv[3]]) == 0
print(sorted(m for m in ("pyarrow", "numpy", "pandas", "torch") if m in sys.modules), file=sys.stderr)
"""


def _oob_launches(recorded: Recorded) -> list[int]:
    return [int(r[0]) for r in recorded.rows("SELECT id FROM launches WHERE oob_lanes > 0 ORDER BY id")]


def _show(db: Path, blobs: Path, launch: int, *more: object) -> dict[str, Any]:
    out = tilelens_in_process("--db", db, "--blobs", blobs, "show", launch, "--json", *more)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_sample_is_the_traces_first_events(examples_recording: Recorded) -> None:
    launches = _oob_launches(examples_recording)
    assert launches
    with open_query(str(examples_recording.db), examples_recording.blobs) as q:
        for launch in launches:
            ((raw,),) = examples_recording.rows(f"SELECT oob_sample FROM launches WHERE id = {launch}")
            sample = json.loads(raw)
            found = lanes.oob_rows(q.trace(launch), SAMPLE_EVENTS)
            assert sample["total"] == found.total > 0
            assert len(sample["events"]) == min(found.total, SAMPLE_EVENTS)
            for kept, row in zip(sample["events"], found.rows, strict=True):
                assert kept["oob_offsets"] == list(row["oob_offsets"])
                assert {k: v for k, v in kept.items() if k != "oob_offsets"} == {
                    k: row[k] for k in kept if k != "oob_offsets"
                }
    no_oob = examples_recording.rows(
        "SELECT count(*) FROM launches WHERE oob_lanes = 0 AND oob_sample IS NOT NULL"
    )
    assert no_oob == [(0,)]


def test_show_answers_as_the_trace_would_and_imports_no_pyarrow(
    examples_recording: Recorded, tmp_path: Path
) -> None:
    launch = _oob_launches(examples_recording)[0]
    db, blobs = examples_recording.db, examples_recording.blobs
    sampled = _show(db, blobs, launch)
    old_db = tmp_path / "old.db"
    shutil.copy(db, old_db)
    with sqlite3.connect(old_db) as conn:  # as a launch recorded before 0013 reads
        conn.execute("UPDATE launches SET oob_sample = NULL")
    conn.close()
    from_trace = _show(old_db, blobs, launch)
    assert sampled == from_trace
    assert len(sampled["oob_events"]) == min(sampled["oob_event_count"], SAMPLE_EVENTS) > 0

    proc = subprocess.run(
        [sys.executable, "-c", SHOW_IMPORTS, str(db), str(blobs), str(launch)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "[]"
    assert "out of bounds" in proc.stdout


def test_more_events_than_kept_are_read_from_the_trace(examples_recording: Recorded, tmp_path: Path) -> None:
    launch = _oob_launches(examples_recording)[0]
    blobs = examples_recording.blobs
    expected = _show(examples_recording.db, blobs, launch)
    cut_db = tmp_path / "cut.db"
    shutil.copy(examples_recording.db, cut_db)
    with sqlite3.connect(cut_db) as conn:  # a sample that kept one event of "many": the trace must answer
        ((raw,),) = conn.execute("SELECT oob_sample FROM launches WHERE id = ?", (launch,)).fetchall()
        sample = json.loads(raw)
        sample["events"] = sample["events"][:1]
        sample["total"] = 10**6
        conn.execute("UPDATE launches SET oob_sample = ? WHERE id = ?", (json.dumps(sample), launch))
    conn.close()
    assert _show(cut_db, blobs, launch) == expected
    assert _show(cut_db, blobs, launch, "--oob-events", 1)["oob_event_count"] == 10**6  # one asked: kept one
