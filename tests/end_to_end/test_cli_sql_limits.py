"""Runaway SQL: a timeout, Ctrl-C, and results streamed in constant memory (issue 12, item 10)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.end_to_end.conftest import Recorded, one_line_error, tilelens_argv

ENDLESS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


def test_timeout_stops_an_endless_query(examples_history: Recorded) -> None:
    line = one_line_error(examples_history.cli("sql", ENDLESS, "--timeout", "1"))
    assert line == "tilelens: error: query stopped: it ran past its 1 s timeout"


def test_ctrl_c_stops_a_query_running_inside_sqlite(examples_history: Recorded) -> None:
    # The child starts with SIGINT ignored, so signals sent before `sql` installs its handler are lost instead
    # of killing Python at start-up; from the handler on, the first one must stop the query.
    proc = subprocess.Popen(
        [*tilelens_argv(), *map(str, examples_history.location), "sql", ENDLESS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        while proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            time.sleep(0.3)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, out, err) == (130, "", "tilelens: error: query interrupted\n")


MEASURE = (
    "import resource, subprocess, sys\n"
    "proc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
    "print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, proc.stderr.strip())\n"
)


def test_two_million_rows_stream_in_constant_memory(examples_history: Recorded) -> None:
    rows = 2_000_000
    query = f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows}) SELECT x, 2 * x FROM c"
    # A fresh parent, so that its children's peak RSS is this command's alone (not the test worker's).
    argv = [*tilelens_argv(), *map(str, examples_history.location), "sql", query, "--format", "csv"]
    proc = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True, text=True, timeout=600)
    code, max_rss_kib, err = proc.stdout.split(" ", 2)
    assert (code, err.strip()) == ("0", "")
    # Holding the rows (a tuple and two ints each) would take over 200 MB; streaming stays near start-up size.
    assert int(max_rss_kib) < 120 * 1024


def test_csv_of_a_counted_result(examples_history: Recorded) -> None:
    query = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000) SELECT x FROM c"
    proc = examples_history.cli("sql", query, "--format", "csv")
    assert proc.returncode == 0 and proc.stdout == "x\n" + "".join(f"{i}\n" for i in range(1, 5001))


def test_json_is_streamed_exactly_as_one_document(examples_history: Recorded) -> None:
    raw = "x'00ff'" if examples_history.backend == "sqlite" else "'\\x00ff'::bytea"  # bytes literals differ
    query = f"SELECT id, qualname, NULL AS empty, {raw} AS raw FROM kernels ORDER BY id"
    out = examples_history.main("sql", query, "--format", "json")
    rows = examples_history.rows("SELECT id, qualname FROM kernels ORDER BY id")
    expected = [{"id": i, "qualname": q, "empty": None, "raw": "00ff"} for i, q in rows]
    assert out.stdout == json.dumps(expected, indent=2) + "\n"
    empty = examples_history.main("sql", "SELECT id FROM kernels WHERE id < 0", "--format", "json")
    assert empty.stdout == "[]\n"


def test_a_long_table_prints_rows_as_they_come(examples_history: Recorded) -> None:
    n = 1500  # more than the 1000 rows a sized table holds
    query = f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) SELECT x, 'v' || x AS v FROM c"
    out = examples_history.main("sql", query)
    lines = out.stdout.splitlines()
    # widths from the first 1000 rows: "1000" and "v1000"; later rows are just as wide here; numbers to the right
    assert lines[:3] == ["   x  v", "────  ─────", "   1  v1"]
    assert lines[-1] == "1500  v1500" and len(lines) == n + 2
    assert out.stderr == f"({n} rows)\n"


def test_timeout_must_be_positive(tmp_path: Path) -> None:
    from tests.end_to_end.conftest import tilelens_in_process

    line = one_line_error(
        tilelens_in_process("--db", tmp_path / "h.db", "sql", "SELECT 1", "--timeout", "-1")
    )
    assert "--timeout" in line
