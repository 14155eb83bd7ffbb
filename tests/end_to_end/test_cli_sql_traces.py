"""``tilelens sql`` across access traces: ``trace_events`` joined with the history's views, read-only."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from tests.end_to_end.conftest import one_line_error, tilelens, tilelens_in_process

# x is a view into the middle of buf: the load starts 8 elements before x, inside buf's storage, so exactly 8
# lanes of shift_kernel's load (its first event) are out of bounds, in every run.
SCRIPT = """import torch, triton, triton.language as tl


@triton.jit
def shift_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs - 8, mask=offs < n)  # BUG: starts 8 elements before x
    tl.store(out_ptr + offs, x, mask=offs < n)


@triton.jit
def fill_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 1.0, mask=offs < n)


buf = torch.arange(1000.0)
x = buf[500:600]
out = torch.zeros(100)
shift_kernel[(1,)](x, out, 100, BLOCK=128)
fill_kernel[(1,)](out, 100, BLOCK=128)
"""
LOAD_LINE = (
    SCRIPT.splitlines().index(
        "    x = tl.load(x_ptr + offs - 8, mask=offs < n)  # BUG: starts 8 elements before x"
    )
    + 1
)

OOB_LINES = (
    "SELECT l.tag, t.line, count(*) AS oob_lanes, min(t.event) AS event, min(t.op) AS op "
    "FROM trace_events t JOIN launch_overview l ON l.launch_id = t.launch_id "
    "WHERE t.oob AND l.kernel LIKE '%shift_kernel' GROUP BY l.tag, t.line ORDER BY l.tag"
)


@pytest.fixture(scope="module")
def recorded_sqlite(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp("traces")
    (folder / "shift.py").write_text(SCRIPT)
    db = folder / "h.db"
    for tag in ("one", "two"):
        proc = tilelens("--db", db, "--blobs", folder / "blobs", "record", "--tag", tag, folder / "shift.py")
        assert proc.returncode == 0, proc.stderr
    return str(db), folder / "blobs"


@pytest.fixture(params=BACKENDS)
def recorded(
    request: pytest.FixtureRequest, recorded_sqlite: tuple[str, Path], tmp_path: Path
) -> list[object]:
    db, blobs = recorded_sqlite
    if request.param == "postgresql":
        from tilelens.store import History
        from tilelens.store.admin.copy import copy_history

        server = request.getfixturevalue("postgres_server")
        url = server.url(server.create_database())
        with History.open(db, blobs) as src, History.open(url, tmp_path / "blobs") as dst:
            copy_history(src, dst)
        db, blobs = url, tmp_path / "blobs"
    return ["--db", db, "--blobs", blobs]


def _rows(where: list[object], sql: str) -> list[dict]:
    out = tilelens_in_process(*where, "sql", sql, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_lines_that_went_out_of_bounds_across_runs(recorded: list[object]) -> None:
    assert _rows(recorded, OOB_LINES) == [
        {"tag": "one", "line": LOAD_LINE, "oob_lanes": 8, "event": 0, "op": "load"},
        {"tag": "two", "line": LOAD_LINE, "oob_lanes": 8, "event": 0, "op": "load"},
    ]


def test_trace_events_has_the_export_columns_and_every_lane(recorded: list[object]) -> None:
    rows = _rows(
        recorded,
        "SELECT l.kernel, t.op, count(*) AS lanes, sum(CAST(t.active AS INT)) AS active "
        "FROM trace_events t JOIN launch_overview l ON l.launch_id = t.launch_id GROUP BY ALL ORDER BY ALL",
    )
    # 128 lanes an event, 100 of them active; one load and one store of shift_kernel, one store of fill_kernel,
    # in each of the two runs.
    assert rows == [
        {"kernel": "__main__.fill_kernel", "op": "store", "lanes": 256, "active": 200},
        {"kernel": "__main__.shift_kernel", "op": "load", "lanes": 256, "active": 200},
        {"kernel": "__main__.shift_kernel", "op": "store", "lanes": 256, "active": 200},
    ]
    (columns,) = _rows(recorded, "SELECT * FROM trace_events LIMIT 1")
    assert list(columns) == [
        "launch_id", "pid_x", "pid_y", "pid_z", "event", "op", "arg", "arg_name", "line", "lane", "offset",
        "active", "oob", "kernel", "run_id",
    ]  # fmt: skip


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file's hash; SQLite's ``-shm`` index and an empty ``-wal``, which any reader of a WAL history
    leaves, aside."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and not p.stat().st_size)
    }


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("COPY trace_events TO '{out}'", "refused COPY"),
        ("ATTACH '{out}' AS other", "refused ATTACH"),
        ("SELECT * FROM read_csv('{out}'), trace_events", "refused function read_csv()"),
        ("SELECT * FROM trace_events, read_parquet('{out}')", "refused function read_parquet()"),
        ("SELECT * FROM trace_events, query('SELECT 1')", "refused function query()"),
        ("INSTALL httpfs -- trace_events", "refused INSTALL"),
        ("LOAD httpfs -- trace_events", "refused LOAD"),
        ("SET enable_external_access = true -- trace_events", "refused SET"),
        ("CREATE TABLE t AS SELECT * FROM trace_events", "refused CREATE"),
        ("EXPORT DATABASE '{out}' -- trace_events", "refused EXPORT"),
        ("SELECT 1 FROM trace_events; COPY trace_events TO '{out}'", "one statement at a time"),
        # past the gate, DuckDB itself: external access off and locked before the statement runs (each DuckDB
        # release words the refusal its own way)
        ("SELECT * FROM trace_events, \"read_text\"('{out}')", "Permission Error"),
        (
            "SELECT * FROM trace_events WHERE line = (SELECT count(*) FROM '{out}')",
            "Permission Error",
        ),
    ],
)
def test_trace_queries_reach_no_file(
    recorded_sqlite: tuple[str, Path], tmp_path: Path, sql: str, message: str
) -> None:
    db, blobs = recorded_sqlite
    out = tmp_path / "written.csv"
    before = _snapshot(Path(db).parent)
    line = one_line_error(tilelens_in_process("--db", db, "--blobs", blobs, "sql", sql.format(out=out)))
    assert message in line
    assert not out.exists() and _snapshot(Path(db).parent) == before


def test_result_to_arrow_and_pandas(recorded_sqlite: tuple[str, Path]) -> None:
    from tilelens import open_query

    db, blobs = recorded_sqlite
    with open_query(db, blobs) as q:
        result = q.sql(OOB_LINES)
        plain = q.sql(
            "SELECT kernel, count(*) AS n, avg(duration_s) * 0 AS zero FROM launch_overview "
            "GROUP BY kernel ORDER BY kernel"
        )
    table = result.to_arrow()
    assert table.column_names == ["tag", "line", "oob_lanes", "event", "op"]
    assert table.to_pylist()[0] == {
        "tag": "one",
        "line": LOAD_LINE,
        "oob_lanes": 8,
        "event": 0,
        "op": "load",
    }
    frame = plain.to_pandas()
    assert list(frame["kernel"]) == ["__main__.fill_kernel", "__main__.shift_kernel"]
    assert list(frame["n"]) == [2, 2] and list(frame["zero"]) == [0.0, 0.0]


HEAVY = "SELECT count(*) FROM trace_events a, trace_events b, trace_events c, trace_events d"  # 768^4 rows


def test_a_trace_query_stops_at_its_timeout_and_on_ctrl_c(recorded_sqlite: tuple[str, Path]) -> None:
    import threading

    from tilelens import open_query
    from tilelens.errors import QueryInterruptedError

    db, blobs = recorded_sqlite
    line = one_line_error(tilelens_in_process("--db", db, "--blobs", blobs, "sql", "--timeout", "0.2", HEAVY))
    assert line == "tilelens: error: query stopped: it ran past its 0.2 s timeout"
    cancel = threading.Event()
    cancel.set()  # Ctrl-C already pressed: the statement is interrupted at the watcher's first look
    with (
        open_query(db, blobs) as q,
        pytest.raises(QueryInterruptedError, match="query interrupted"),
        q.sql_stream(HEAVY, cancel=cancel) as rows,
    ):
        list(rows)


def test_the_documented_query_answers_with_the_hand_computed_rows(recorded_sqlite: tuple[str, Path]) -> None:
    import re

    from tests.end_to_end.conftest import ROOT

    section = (ROOT / "docs" / "sql.md").read_text().split("## SQL across traces", 1)[1].split("\n## ", 1)[0]
    (query,) = re.findall(r"```sql\n(.*?)```", section, re.DOTALL)
    db, blobs = recorded_sqlite
    assert _rows(["--db", db, "--blobs", blobs], query) == [
        {"run_id": 1, "line": LOAD_LINE, "oob_lanes": 8},
        {"run_id": 2, "line": LOAD_LINE, "oob_lanes": 8},
    ]
