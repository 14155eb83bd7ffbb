"""``show`` answers from the rows: distinct elements stored at record time (migration 0011), no trace decoded.

Launches recorded before 0011 have no stored count; ``show`` computes theirs from the trace, as it always did.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.end_to_end.conftest import ROOT, Recorded, tilelens_in_process
from tilelens.store.files import lanes
from tilelens.store.read.query import open_query

SHOW_IMPORTS = """
import sys
from tilelens.cli import main
assert main(["--db", sys.argv[1], "--blobs", sys.argv[2], "show", sys.argv[3]]) == 0
print(sorted(m for m in ("pyarrow", "numpy", "torch", "sqlalchemy") if m in sys.modules), file=sys.stderr)
"""


def _no_oob_launch(recorded: Recorded) -> int:
    return int(
        recorded.rows("SELECT min(id) FROM launches WHERE oob_lanes = 0 AND trace_blob IS NOT NULL")[0][0]
    )


def test_the_stored_counts_are_what_the_trace_says(examples_recording: Recorded) -> None:
    stored = examples_recording.rows(
        "SELECT a.launch_id, a.position, a.distinct_elements FROM launch_args a "
        "JOIN launches l ON l.id = a.launch_id WHERE l.trace_blob IS NOT NULL AND a.access IS NOT NULL"
    )
    assert len(stored) >= 20 and all(count is not None for _, _, count in stored)
    per_launch: dict[int, dict[int, int]] = {}
    for launch_id, position, count in stored:
        per_launch.setdefault(launch_id, {})[position] = count
    with open_query(str(examples_recording.db), examples_recording.blobs) as q:
        for launch_id, counts in per_launch.items():
            computed = lanes.distinct_elements(q.trace(launch_id))
            assert counts == {p: computed.get(p, 0) for p in counts}, launch_id


def test_show_of_a_new_launch_imports_no_pyarrow(examples_recording: Recorded) -> None:
    launch = _no_oob_launch(examples_recording)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            SHOW_IMPORTS,
            str(examples_recording.db),
            str(examples_recording.blobs),
            str(launch),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "[]"
    assert "distinct" in proc.stdout


def test_launches_recorded_before_0011_are_counted_from_their_trace(
    examples_recording: Recorded, tmp_path: Path
) -> None:
    launch = _no_oob_launch(examples_recording)
    new = json.loads(examples_recording.main("show", launch, "--json").stdout)
    old_db = tmp_path / "old.db"
    shutil.copy(examples_recording.db, old_db)
    with sqlite3.connect(old_db) as conn:  # as a launch recorded before the column existed reads
        conn.execute("UPDATE launch_args SET distinct_elements = NULL")
    conn.close()
    old = tilelens_in_process("--db", old_db, "--blobs", examples_recording.blobs, "show", launch, "--json")
    assert old.returncode == 0, old.stderr
    distinct = [a["access"]["distinct_elements"] for a in json.loads(old.stdout)["args"] if a["access"]]
    assert distinct == [a["access"]["distinct_elements"] for a in new["args"] if a["access"]]
    assert all(isinstance(d, int) and d > 0 for d in distinct)
