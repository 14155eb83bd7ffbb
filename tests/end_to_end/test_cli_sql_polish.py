"""``tilelens sql`` tables (numbers right-aligned, floats to 6 digits), ``sql -`` and ``tilelens tables``."""

from __future__ import annotations

import io
import json

import pytest

from tests.end_to_end.conftest import Recorded, one_line_error
from tilelens.store.files.lanes import LANE_SCHEMA
from tilelens.store.read.query import open_query

VALUES = "SELECT 1.0 / 3 AS third, 12345678.9 AS big, 'x' AS s, 42 AS n, NULL AS z, 2.5 AS exact"


def test_numbers_right_aligned_and_floats_readable(examples_history: Recorded) -> None:
    out = examples_history.main("sql", VALUES)
    assert out.returncode == 0, out.stderr
    assert [line.rstrip() for line in out.stdout.splitlines()] == [
        "",
        "    third           big   s    n   z   exact",
        " " + "─" * 43,
        " 0.333333   1.23457e+07   x   42         2.5",
        "",
    ]
    # Machine formats keep the values exactly.
    (row,) = json.loads(examples_history.main("sql", VALUES, "--format", "json").stdout)
    assert row["third"] == pytest.approx(1 / 3, rel=1e-15) and row["big"] == 12345678.9


def test_a_long_result_is_streamed_with_numbers_right_aligned(examples_history: Recorded) -> None:
    sql = (
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1001) "
        "SELECT i, i * 0.5 AS half, 'r' || i AS name FROM c"
    )
    lines = examples_history.main("sql", sql).stdout.splitlines()
    assert lines[:3] == ["   i   half  name", "────  ─────  ─────", "   1    0.5  r1"]
    assert lines[-1] == "1001  500.5  r1001"


def test_sql_dash_reads_the_query_from_stdin(
    examples_history: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("SELECT count(*) AS n\nFROM runs\n"))
    out = examples_history.main("sql", "-", "--format", "csv")
    assert (out.returncode, out.stdout) == (0, f"n\n{len(examples_history.rows('SELECT id FROM runs'))}\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert one_line_error(examples_history.main("sql", "-")) == "tilelens: error: no query on standard input"


def test_tables_lists_tables_views_and_trace_events(examples_history: Recorded) -> None:
    with open_query(str(examples_history.db), examples_history.blobs) as q:
        found = {t.name: t for t in q.tables()}
    assert {"runs", "kernels", "launches", "launch_args", "autotune_events", "replays", "blobs"} <= set(found)
    assert {n for n, t in found.items() if t.kind == "view"} == {
        "launch_overview", "oob_launches", "autotune_choices", "run_overview",
    }  # fmt: skip
    assert "distinct_elements" in [c.name for c in found["launch_args"].columns]
    assert [c.name for c in found["run_overview"].columns][:3] == ["run_id", "started_at", "finished_at"]
    traces = found["trace_events"]
    assert traces.kind == "traces"
    assert [(c.name, c.type) for c in traces.columns] == [
        (f.name, "bool" if str(f.type) == "bool" else str(f.type)) for f in LANE_SCHEMA
    ] + [("kernel", "string"), ("run_id", "int64")]
    listed = json.loads(examples_history.main("tables", "--json").stdout)
    assert [t["name"] for t in listed] == list(found)
    text = examples_history.main("tables", "oob_launches").stdout.splitlines()
    assert text[0] == f"oob_launches  view, {len(found['oob_launches'].columns)} columns"
    assert text[1].split() == ["launch_id", "integer", "the", "launch", "(launches.id)"]
    assert "no table or view named 'nope'" in one_line_error(examples_history.main("tables", "nope"))
