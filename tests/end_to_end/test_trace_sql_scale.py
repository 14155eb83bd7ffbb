"""``trace_events`` at scale: DuckDB expands the lanes from the trace blobs' Parquet itself (the SQL twin of the
Python decoder ``tilelens export`` uses, held to the same rows here), reads each distinct trace once, and
reads only the traces of the launches a statement's filters on launch, kernel and run keep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.end_to_end.conftest import tilelens, tilelens_in_process
from tilelens import api
from tilelens.store.read import tracepush

# Every shape of trace row: 1-D and 2-D affine blocks, partial masks, a gather (irregular offsets), lanes
# out of bounds, an atomic; and two launches of one kernel on one shape, which share their trace blob.
SCRIPT = """import torch, triton, triton.language as tl


@triton.jit
def tile_kernel(x_ptr, out_ptr, rows, cols, stride, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)[:, None]
    c = tl.arange(0, BC)[None, :]
    mask = (r < rows) & (c < cols)
    tl.store(out_ptr + r * stride + c, tl.load(x_ptr + r * stride + c, mask=mask) * 2, mask=mask)


@triton.jit
def gather_kernel(x_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    idx = tl.load(idx_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + offs, tl.load(x_ptr + idx, mask=offs < n), mask=offs < n)


@triton.jit
def shift_kernel(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs - 3, mask=offs < n)
    tl.atomic_add(total_ptr + offs % 4, x, mask=offs < n)


x = torch.arange(60.0).reshape(6, 10)
out = torch.zeros(6, 10)
tile_kernel[(2,)](x, out, 6, 10, 10, BR=4, BC=16)
tile_kernel[(2,)](x, out, 6, 10, 10, BR=4, BC=16)
tile_kernel[(1,)](x, out, 3, 7, 10, BR=4, BC=8)
src = torch.arange(100.0)
idx = torch.tensor([5, 99, 0, 42, 42, 17, 3, 64], dtype=torch.int64)
gather_kernel[(1,)](src, idx, torch.zeros(8), 6, BLOCK=8)
buf = torch.arange(50.0)
shift_kernel[(1,)](buf[10:30], torch.zeros(4), 20, BLOCK=32)
"""
LANE_COLUMNS = 'launch_id, pid_x, pid_y, pid_z, event, op, arg, arg_name, line, lane, "offset", active, oob'


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    folder = tmp_path_factory.mktemp("scale")
    (folder / "k.py").write_text(SCRIPT)
    where: list[Any] = ["--db", folder / "h.db", "--blobs", folder / "blobs"]
    proc = tilelens(*where, "record", folder / "k.py")
    assert proc.returncode == 0, proc.stderr
    return where


def _sql(where: list[Any], sql: str) -> list[dict[str, Any]]:
    out = tilelens_in_process(*where, "sql", sql, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c.strip().strip('"')] for c in LANE_COLUMNS.split(","))


def test_every_lane_is_what_the_python_decoder_exports(history: list[Any], tmp_path: Path) -> None:
    launches = [r["launch_id"] for r in _sql(history, "SELECT id AS launch_id FROM launches ORDER BY id")]
    assert len(launches) == 5
    exported: list[tuple[Any, ...]] = []
    for launch in launches:
        out = tmp_path / f"{launch}.parquet"
        assert tilelens_in_process(*history, "export", launch, "-o", out).returncode == 0
        exported += [_key(r) for r in pq.read_table(out).to_pylist()]
    whole = [_key(r) for r in _sql(history, f"SELECT {LANE_COLUMNS} FROM trace_events")]
    assert sorted(whole) == sorted(exported)
    # Each kind of row was there to compare: 2-D blocks, a gather, masked-off, out-of-bounds and atomic lanes.
    assert len(whole) == 2 * 2 * 2 * 64 + 2 * 32 + 3 * 8 + 2 * 32
    assert {r[5] for r in whole} == {"load", "store", "atomic_fadd"}
    assert sum(1 for r in whole if r[12]) == 3 and sum(1 for r in whole if not r[11]) > 0
    gathered = sorted(r[10] for r in whole if r[7] == "x_ptr" and r[11] and r[0] == launches[3])
    assert gathered == [0, 5, 17, 42, 42, 99]
    for launch in (launches[0], launches[3]):  # one launch's lanes alone, through the pushed filter
        alone = [
            _key(r)
            for r in _sql(history, f"SELECT {LANE_COLUMNS} FROM trace_events WHERE launch_id = {launch}")
        ]
        assert sorted(alone) == sorted(r for r in exported if r[0] == launch)


def test_the_columns_are_those_the_catalog_lists(history: list[Any]) -> None:
    from tilelens.store.read.catalog import TRACE_COLUMNS

    out = tilelens_in_process(*history, "sql", "SELECT * FROM trace_events LIMIT 1", "--format", "json")
    assert list(json.loads(out.stdout)[0]) == [name for name, _ in TRACE_COLUMNS]


def test_kernel_and_run_are_columns_of_every_lane(history: list[Any]) -> None:
    rows = _sql(
        history, "SELECT kernel, run_id, count(*) AS lanes FROM trace_events GROUP BY ALL ORDER BY ALL"
    )
    assert rows == [
        {"kernel": "__main__.gather_kernel", "run_id": 1, "lanes": 3 * 8},
        {"kernel": "__main__.shift_kernel", "run_id": 1, "lanes": 2 * 32},
        {"kernel": "__main__.tile_kernel", "run_id": 1, "lanes": 2 * 2 * 2 * 64 + 2 * 32},
    ]


@pytest.mark.parametrize(
    ("where", "launches", "traces"),
    [
        ("", 5, 4),  # the two identical tile launches share one trace: it is read once
        ("WHERE launch_id = 1", 1, 1),
        ("WHERE launch_id IN (1, 2)", 2, 1),
        ("WHERE kernel LIKE '%tile%'", 3, 2),
        ("WHERE t.kernel = '__main__.gather_kernel' AND t.run_id = 1 AND t.line > 0", 1, 1),
        ("WHERE run_id = 2", 0, 0),
        ("WHERE line > 0", 5, 4),  # not a launch column: every trace
        ("WHERE launch_id = 1 OR line > 0", 5, 4),  # one side reads lanes: not pushed
    ],
)
def test_only_the_traces_of_the_launches_kept_are_read(
    history: list[Any], monkeypatch: pytest.MonkeyPatch, where: str, launches: int, traces: int
) -> None:
    from tilelens.store.read.query import HistoryQuery

    read: list[str] = []
    real = HistoryQuery.trace_file
    monkeypatch.setattr(HistoryQuery, "trace_file", lambda self, sha: read.append(sha) or real(self, sha))
    alias = "t" if "t." in where else ""
    rows = _sql(history, f"SELECT count(DISTINCT launch_id) AS n FROM trace_events {alias} {where}")
    assert rows == [{"n": launches}]
    assert len(read) == len(set(read)) == traces


@pytest.mark.parametrize(
    ("sql", "pushed"),
    [
        ("SELECT * FROM trace_events WHERE launch_id = 7", "(launch_id = 7)"),
        ("SELECT * FROM trace_events t WHERE t.launch_id IN (1, 2) AND line = 3", "(t.launch_id IN (1, 2))"),
        (
            "SELECT * FROM trace_events AS e JOIN launches l ON l.id = e.launch_id "
            "WHERE e.kernel LIKE '%x' AND l.status = 'ok' AND e.run_id BETWEEN 2 AND 4",
            "((e.kernel ~~ '%x') AND (e.run_id BETWEEN 2 AND 4))",
        ),
        (
            "SELECT * FROM trace_events, launches WHERE trace_events.kernel_id = 3",
            "(trace_events.kernel_id = 3)",
        ),
        # What cannot be pushed exactly pushes nothing.
        ("SELECT * FROM trace_events t JOIN launches l ON l.id = t.launch_id WHERE launch_id = 7", None),
        (
            "SELECT * FROM launches l LEFT JOIN trace_events t ON l.id = t.launch_id WHERE t.launch_id = 7",
            None,
        ),
        ("SELECT * FROM trace_events WHERE launch_id = (SELECT max(id) FROM launches)", None),
        ("SELECT * FROM trace_events WHERE launch_id IN (SELECT launch_id FROM trace_events)", None),
        ("WITH x AS (SELECT 1) SELECT * FROM trace_events WHERE launch_id = 7", None),
        ("SELECT 1 FROM trace_events WHERE launch_id = 7 UNION SELECT 2", None),
        ("SELECT * FROM trace_events USING SAMPLE 10 ROWS WHERE launch_id = 7", None),
        ("SELECT * FROM trace_events WHERE launch_id < random() * 10", None),
        ("SELECT * FROM trace_events WHERE launch_id = 7 OR op = 'load'", None),
        ("SELECT * FROM trace_events -- trace_events\nWHERE launch_id = 7", None),
        ("SELECT * FROM (SELECT * FROM trace_events) s WHERE launch_id = 7", None),
    ],
)
def test_which_filters_reach_the_trace_reader(sql: str, pushed: str | None) -> None:
    import duckdb

    found = tracepush.launch_filter(duckdb.connect(":memory:"), sql)
    assert (found.sql if found else None) == pushed


def test_a_pushed_filter_is_evaluated_where_no_file_can_be_read(
    history: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The filter runs before any trace is read, so on a database of its own that never has file access: here
    it names launch len('false') = 5 (with access on it would name launch 4 and read that launch's trace)."""
    from tilelens.store.read.query import HistoryQuery

    read: list[str] = []
    real = HistoryQuery.trace_file
    monkeypatch.setattr(HistoryQuery, "trace_file", lambda self, sha: read.append(sha) or real(self, sha))
    setting = "length(current_setting('enable_external_access')::VARCHAR)"
    rows = _sql(history, f"SELECT DISTINCT launch_id FROM trace_events WHERE launch_id = {setting}")
    with api.open_query(str(history[1]), history[3]) as q:
        ((sha,),) = q.sql("SELECT trace_blob FROM launches WHERE id = 5").rows
    assert rows == [{"launch_id": 5}] and read == [sha]


def test_a_query_about_one_launch_needs_no_other_blob(history: list[Any], tmp_path: Path) -> None:
    """The other traces are not even opened: one launch's lanes answer with every other blob gone."""
    import shutil

    db, blobs = Path(history[1]), Path(history[3])
    copy = tmp_path / "copy"
    shutil.copytree(db.parent, copy, ignore=shutil.ignore_patterns("blobs"))
    with api.open_query(str(db), blobs) as q:
        ((sha,),) = q.sql("SELECT trace_blob FROM launches WHERE id = 4").rows
    (copy / "blobs" / sha[:2]).mkdir(parents=True)
    shutil.copy(blobs / sha[:2] / sha, copy / "blobs" / sha[:2] / sha)
    where = ["--db", copy / db.name, "--blobs", copy / "blobs"]
    assert _sql(where, "SELECT count(*) AS n FROM trace_events WHERE launch_id = 4") == [{"n": 3 * 8}]
    out = tilelens_in_process(*where, "sql", "SELECT count(*) FROM trace_events")
    assert out.returncode == 2 and "access trace: blob" in out.stderr


def test_a_timeout_that_passes_between_statements_still_stops_the_query(
    history: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline passes while the views are made, when no statement runs to interrupt: the watcher keeps
    interrupting, so the query, started after, is stopped too rather than left to run unbounded."""
    import time

    from tilelens.store.read import tracelanes

    real = tracelanes.create_views

    def slow(con: Any, width: int) -> None:
        time.sleep(0.5)
        real(con, width)

    monkeypatch.setattr(tracelanes, "create_views", slow)
    heavy = "SELECT count(*) FROM trace_events a, trace_events b, trace_events c, trace_events d"
    out = tilelens_in_process(*history, "sql", "--timeout", "0.2", heavy)
    assert (
        out.returncode == 2
        and out.stderr.strip() == "tilelens: error: query stopped: it ran past its 0.2 s timeout"
    )
