"""``tilelens export --dataset DIR``: the history as a Hive-partitioned Parquet dataset (issue 49, point 4).

The dataset is read back as other engines read it (DuckDB's ``read_parquet(..., hive_partitioning=true)`` and
``pyarrow.dataset`` with Hive partitioning) and counted against the history: launches, arguments per launch,
lanes per launch (the trace's own ``lanes`` column), launches per (kernel, day) partition, ``--run``.
"""

from __future__ import annotations

import collections
import datetime as dt
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tests import store_helpers
from tests.end_to_end.conftest import Recorded, one_line_error, tilelens, tilelens_in_process
from tilelens.config import Location
from tilelens.records import KernelIdentity
from tilelens.store import History
from tilelens.store.files.dataset import ARGUMENT_SCHEMA, LAUNCH_SCHEMA
from tilelens.store.files.lanes import LANE_SCHEMA
from tilelens.store.read.query import open_query
from tilelens.store.read.results import decode_time

TABLES = {"launches": LAUNCH_SCHEMA, "arguments": ARGUMENT_SCHEMA, "trace_lanes": LANE_SCHEMA}


def duck(folder: Path, table: str, select: str, tail: str = "") -> list[tuple[Any, ...]]:
    """``SELECT select FROM`` the table as DuckDB reads the dataset, Hive partitions and all."""
    source = f"read_parquet('{folder / table}/**/*.parquet', hive_partitioning=true)"
    with duckdb.connect() as con:
        return con.execute(f"SELECT {select} FROM {source} {tail}").fetchall()


def arrow(folder: Path, table: str) -> pa.Table:
    return ds.dataset(folder / table, format="parquet", partitioning="hive").to_table()


def utc_day(value: Any) -> str:
    moment = decode_time(value)
    assert moment is not None
    return moment.date().isoformat()


def trace_lanes(db: str, blobs: Path, launch_id: int) -> int:
    """A launch's lanes as its trace blob counts them (the ``lanes`` column of the recorded trace)."""
    with open_query(db, blobs) as q:
        return int(pa.array(q.trace(launch_id).column("lanes")).to_numpy().sum())


# -- the recorded examples, on SQLite and PostgreSQL -------------------------------------------------------


def test_the_dataset_holds_the_history_exactly(examples_history: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "lens"
    proc = examples_history.main("export", "--dataset", out, "--json")
    assert proc.returncode == 0, proc.stderr
    written = json.loads(proc.stdout)
    h = examples_history

    launches = h.rows("SELECT id, lanes, load_lanes + store_lanes + atomic_lanes, trace_blob FROM launches")
    args = dict(h.rows("SELECT launch_id, count(*) FROM launch_args GROUP BY launch_id"))
    traced = [r for r in launches if r[3] is not None]
    lanes = {r[0]: trace_lanes(str(h.db), h.blobs, r[0]) for r in traced}
    assert lanes == {r[0]: r[1] for r in traced}  # the trace and the launch row agree
    overview = h.rows("SELECT kernel, started_at FROM launch_overview")
    partitions = collections.Counter((kernel, utc_day(started)) for kernel, started in overview)
    assert len(partitions) >= 5  # the examples' kernels: the test compares something

    # What the command says it wrote.
    rows = {"launches": len(launches), "arguments": sum(args.values()), "trace_lanes": sum(lanes.values())}
    kernels = len({k for k, _ in partitions})
    assert written["rows"] == rows
    assert (written["kernels"], written["partitions"], written["runs"]) == (kernels, len(partitions), None)
    assert written["traces_read"] == len({r[3] for r in traced})
    assert proc.stderr == (
        f"wrote {rows['launches']:,} launches, {rows['arguments']:,} arguments and {rows['trace_lanes']:,} lanes "
        f"({kernels} kernels, {len(partitions)} partitions) to {out}\n"
    )
    manifest = json.loads((out / "dataset.json").read_text())
    assert {name: t["rows"] for name, t in manifest["tables"].items()} == rows

    # DuckDB, as a user would read it.
    assert sorted(duck(out, "launches", "launch_id")) == sorted((r[0],) for r in launches)
    assert dict(duck(out, "arguments", "launch_id, count(*)", "GROUP BY launch_id")) == args
    assert dict(duck(out, "trace_lanes", "launch_id, count(*)", "GROUP BY launch_id")) == lanes
    active = dict(duck(out, "trace_lanes", "launch_id, sum(active::int)", "GROUP BY launch_id"))
    assert active == {r[0]: r[2] for r in traced}
    per_partition = duck(out, "launches", "kernel, CAST(day AS VARCHAR), count(*)", "GROUP BY ALL")
    assert collections.Counter({(k, d): n for k, d, n in per_partition}) == partitions
    lanes_per_kernel = dict(duck(out, "trace_lanes", "kernel, count(*)", "GROUP BY kernel"))
    kernel_of = dict(h.rows("SELECT launch_id, kernel FROM launch_overview"))
    expected: collections.Counter[str] = collections.Counter()
    for launch_id, n in lanes.items():
        expected[kernel_of[launch_id]] += n
    assert lanes_per_kernel == dict(expected)

    # pyarrow.dataset, and the files themselves: one per partition, of the documented schema.
    for table, schema in TABLES.items():
        files = sorted((out / table).rglob("*.parquet"))
        parts = {f.parent.relative_to(out / table) for f in files}
        assert len(files) == len(parts) == written["files"][table]
        assert {f.name for f in files} == {"part-0.parquet"}
        assert all(pq.read_schema(f).equals(schema) for f in files)
        read = arrow(out, table)
        assert read.num_rows == rows[table]
        assert read.schema.names == [*schema.names, "kernel", "day"]
    assert len(list((out / "launches").glob("kernel=*/day=*"))) == len(partitions)

    # A launch's lanes are `tilelens export ID`'s rows, in order.
    (shift,) = h.ids["shift_kernel"]
    got = arrow(out, "trace_lanes").filter(ds.field("launch_id") == shift).drop_columns(["kernel", "day"])
    with open_query(str(h.db), h.blobs) as q:
        assert got.equals(q.lane_table(shift))
    # A launch row carries what launch_overview says of it.
    (row,) = duck(
        out,
        "launches",
        "kernel, module || '.' || qualname, grid_x, grid_y, grid_z, config, status, tag, oob_lanes, test_nodeid",
        f"WHERE launch_id = {shift}",
    )
    (view,) = h.rows(
        "SELECT kernel, kernel, grid_x, grid_y, grid_z, config, status, tag, oob_lanes, test_nodeid "
        f"FROM launch_overview WHERE launch_id = {shift}"
    )
    assert row == tuple(view) and row[8] == 56


# -- a hand-built history: odd names, days, shared traces, runs -----------------------------------------------

ODD_MODULE = "odd mod/x=1"
ODD_QUALNAME = "f.<locals>.k%41 ü,\"'?*#&+;\\"


def odd_kernel() -> KernelIdentity:
    source = "def k(x_ptr, out_ptr, n, BLOCK): ..."
    return KernelIdentity(
        module=ODD_MODULE,
        qualname=ODD_QUALNAME,
        file="/src/odd.py",
        def_line=3,
        source=source,
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        cache_key=None,
    )


def trace(programs: int) -> pa.Table:
    """``programs`` programs, each loading 16 lanes of x and storing 10 of 16 (masked) into out; the last
    program's load runs 6 elements past x's end."""
    from tilelens.core.engine.access import AccessCollector
    from tilelens.core.kernel.spans import ArgSpan, SpanTable

    n = 16 * programs - 6
    collector = AccessCollector(
        SpanTable([ArgSpan(0, 1000, 1000 + 4 * n, 4), ArgSpan(1, 9000, 9000 + 4 * n, 4)])
    )
    for p in range(programs):
        lanes = np.arange(16) + 16 * p
        collector.record("load", (1000 + 4 * lanes).astype(np.uint64), None, 4, (p, 0, 0))
        collector.record("store", (9000 + 4 * lanes).astype(np.uint64), np.arange(16) < 10, 4, (p, 0, 0))
    return collector.finish()


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


@dataclass(frozen=True)
class Small:
    db: str
    blobs: Path
    runs: list[int]  # run a, run b, run c (no launches)
    ids: list[int]  # the launches below, in order
    odd: str  # the odd kernel's partition name
    add: str


# (run, kernel, started_at, programs of its trace or None): two versions of add_kernel share one name; the
# 2-program trace is shared by launches 0, 1 and 4 (two partitions, two runs); 3 was recorded without a trace.
# Launch 1 started at 01:00+02:00, 23:00 UTC the day before.
LAUNCHES = [
    (0, "add", "2026-01-01T23:59:59.500000+00:00", 2),
    (0, "add", "2026-01-02T01:00:00+02:00", 2),
    (0, "odd", "2026-01-02T00:00:00+00:00", 3),
    (0, "add2", "2026-01-02T12:00:00+00:00", None),
    (1, "add2", "2026-01-02T13:00:00+00:00", 2),
    (1, "odd", "2026-01-02T14:00:00+00:00", 3),
]


@pytest.fixture
def small(history: History, history_location: Location) -> Small:
    kernels = {
        "add": store_helpers.kernel(),
        "add2": store_helpers.kernel(source="def add_kernel(x, y, out, n, BLOCK): pass  # v2"),
        "odd": odd_kernel(),
    }
    runs = [history.begin_run(store_helpers.run_info(tag=t)) for t in ("a", "b", "c")]
    ids = []
    for seq, (run, name, started, programs) in enumerate(LAUNCHES):
        rec = store_helpers.launch(
            k=kernels[name],
            trace=None if programs is None else trace(programs),
            seq=seq,
            started_at=at(started),
        )
        ids.append(history.write_launch(runs[run], rec))
    for run in runs:
        history.finish_run(run, "ok", 0)
    location = history_location
    return Small(
        location.db_url,
        location.blobs_dir,
        runs,
        ids,
        f"{ODD_MODULE}.{ODD_QUALNAME}",
        "tests.kernels.add_kernel",
    )


def export(small: Small, *args: object) -> Any:
    return tilelens_in_process("--db", small.db, "--blobs", small.blobs, "export", *args)


def test_odd_kernel_names_days_and_shared_traces(
    small: Small, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tilelens.store.files.blobs import BlobStore

    reads: list[str] = []
    get_bytes = BlobStore.get_bytes

    def counted(self: BlobStore, sha256: str) -> Any:
        reads.append(sha256)
        return get_bytes(self, sha256)

    monkeypatch.setattr(BlobStore, "get_bytes", counted)
    out = tmp_path / "lens"
    proc = export(small, "--dataset", out, "--json")
    assert proc.returncode == 0, proc.stderr
    written = json.loads(proc.stdout)
    assert written["rows"] == {"launches": 6, "arguments": 24, "trace_lanes": 3 * 64 + 2 * 96}
    # The 2-program trace of three launches, in two partitions and two runs, is read once.
    assert written["traces_read"] == len(reads) == len(set(reads)) == 2
    monkeypatch.undo()
    days = {"2026-01-01": [0, 1], "2026-01-02": [3, 4]}
    expected = {(small.add, day): [small.ids[i] for i in picked] for day, picked in days.items()}
    expected[(small.odd, "2026-01-02")] = [small.ids[2], small.ids[5]]
    assert written["partitions"] == len(expected) == 3

    # The exact names come back from the folder names, through either reader.
    for table in ("launches", "arguments", "trace_lanes"):
        got = collections.defaultdict(set)
        for kernel, day, launch_id in duck(out, table, "kernel, CAST(day AS VARCHAR), launch_id"):
            got[(kernel, day)].add(launch_id)
        want = {key: set(ids) for key, ids in expected.items()}
        if table == "trace_lanes":  # launch 3 has no trace
            want[(small.add, "2026-01-02")] = {small.ids[4]}
        assert dict(got) == want, table
        read = arrow(out, table).to_pydict()
        assert set(zip(read["kernel"], read["day"])) == set(want), table
    (odd,) = [p for p in (out / "launches").iterdir() if "locals" in p.name]
    # ASCII punctuation escaped, ü kept (Spark would decode %C3%BC as two characters).
    assert odd.name == "kernel=odd%20mod%2Fx%3D1.f.%3Clocals%3E.k%2541%20ü%2C%22%27%3F%2A%23%26%2B%3B%5C"
    rows = duck(out, "launches", "kernel, module, qualname", "WHERE kernel LIKE 'odd%'")
    assert set(rows) == {(small.odd, ODD_MODULE, ODD_QUALNAME)}

    # Two versions of add_kernel share its partitions; each launch keeps its own version.
    versions = duck(out, "launches", "count(DISTINCT source_sha256)", f"WHERE kernel = '{small.add}'")
    assert versions == [(2,)]
    lanes = dict(duck(out, "trace_lanes", "launch_id, count(*)", "GROUP BY ALL"))
    assert lanes == {
        i: trace_lanes(small.db, small.blobs, i)
        for n, i in enumerate(small.ids)
        if LAUNCHES[n][3] is not None
    }
    # Each launch's lanes are `export ID`'s, in order; launch 1 reuses launch 0's decoded lanes.
    every = arrow(out, "trace_lanes").drop_columns(["kernel", "day"])
    with open_query(small.db, small.blobs) as q:
        for launch_id in lanes:
            assert every.filter(ds.field("launch_id") == launch_id).equals(q.lane_table(launch_id)), launch_id
    oob = duck(out, "trace_lanes", "launch_id, count(*)", "WHERE oob GROUP BY ALL ORDER BY launch_id")
    assert oob == [(i, 6) for n, i in enumerate(small.ids) if LAUNCHES[n][3] is not None]
    started = duck(out, "launches", "launch_id, started_at", "ORDER BY launch_id")
    assert [t for _, t in started] == [at(s) for _, _, s, _ in LAUNCHES]
    written_args = duck(
        out, "arguments", "name, shape, written", f"WHERE launch_id = {small.ids[0]} ORDER BY position"
    )
    assert written_args == [
        ("x_ptr", [16], False),
        ("out_ptr", [16], False),
        ("n", None, False),
        ("BLOCK", None, False),
    ]


def test_run_filter_keeps_the_runs_given(small: Small, tmp_path: Path) -> None:
    a, b, c = small.runs
    out = tmp_path / "b"
    proc = export(small, "--dataset", out, "--run", b, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["runs"] == [b]
    assert sorted(duck(out, "launches", "launch_id, run_id, tag")) == [
        (small.ids[4], b, "b"),
        (small.ids[5], b, "b"),
    ]
    assert dict(duck(out, "arguments", "launch_id, count(*)", "GROUP BY ALL")) == {
        small.ids[4]: 4,
        small.ids[5]: 4,
    }
    assert sorted(duck(out, "trace_lanes", "DISTINCT launch_id")) == [(small.ids[4],), (small.ids[5],)]

    both = tmp_path / "ab"
    assert export(small, "--dataset", both, "--run", b, "--run", a).returncode == 0
    assert duck(both, "launches", "count(*)") == [(6,)]

    # A run without launches: a dataset of empty tables (folders without files).
    empty = tmp_path / "c"
    proc = export(small, "--dataset", empty, "--run", c)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"wrote 0 launches, 0 arguments and 0 lanes (0 kernels, 0 partitions) to {empty}\n"
    assert sorted(p.name for p in empty.iterdir()) == ["arguments", "dataset.json", "launches", "trace_lanes"]
    assert [list((empty / t).iterdir()) for t in TABLES] == [[], [], []]


# -- refusals and the folder's life ---------------------------------------------------------------------------


def entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_refusals_are_one_line_and_write_nothing(small: Small, tmp_path: Path) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    with open_query(small.db, small.blobs) as q:
        label = q.reader.label
    cases = {
        ("--dataset", full): f"{full} exists and is not an empty folder (--force replaces it)",
        (str(small.ids[0]), "--dataset", tmp_path / "x"): "give a launch ID or --dataset DIR, not both",
        ("--dataset", tmp_path / "x", "--run", 4242, "--run", small.runs[0], "--run", 999): (
            f"no run 999, 4242 in history {label}"
        ),
        ("--dataset", tmp_path / "x", "-o", tmp_path / "y.parquet"): (
            "--dataset writes Parquet into DIR; --format and -o are for one launch ID"
        ),
        ("--dataset", tmp_path / "x", "--format", "csv"): (
            "--dataset writes Parquet into DIR; --format and -o are for one launch ID"
        ),
        (
            str(small.ids[0]),
            "--run",
            small.runs[0],
            "--force",
        ): "--run, --force go with --dataset DIR, not with a launch ID",
        (): "give a launch ID to export, or --dataset DIR for the history",
        ("--dataset", ""): "--dataset needs a folder name",
        (
            "--dataset",
            tmp_path / "no" / "such",
        ): f"cannot write into {tmp_path / 'no'}: not a writable folder",
        ("--dataset", small.blobs / "ds"): (
            f"{small.blobs / 'ds'} is inside the history's blob folder {small.blobs}; write it elsewhere"
        ),
    }
    for args, message in cases.items():
        assert one_line_error(export(small, *args)) == f"tilelens: error: {message}", args
    assert entries(tmp_path) == ["full", "history"]
    assert entries(full) == ["keep.txt"]
    assert not [name for name in entries(small.blobs) if "ds" in name]  # no ds, no .ds-*.partial


def test_refusal_in_a_fresh_process(examples_recording: Recorded, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    proc = tilelens(*examples_recording.location, "export", "--dataset", tmp_path / "out")
    assert one_line_error(proc).endswith("out exists and is not an empty folder (--force replaces it)")
    assert entries(tmp_path) == ["out"] and entries(tmp_path / "out") == ["x"]


def test_force_replaces_an_existing_folder_and_keeps_a_link(small: Small, tmp_path: Path) -> None:
    out = tmp_path / "lens"
    out.mkdir()  # empty: taken as it is
    assert export(small, "--dataset", out, "--run", small.runs[1]).returncode == 0
    assert duck(out, "launches", "count(*)") == [(2,)]
    (out / "notes.txt").write_text("old")
    assert export(small, "--dataset", out, "--force").returncode == 0
    assert duck(out, "launches", "count(*)") == [(6,)]
    assert "notes.txt" not in entries(out)
    link = tmp_path / "link"
    link.symlink_to("lens")
    assert export(small, "--dataset", link, "--force", "--run", small.runs[0]).returncode == 0
    assert link.is_symlink() and os.readlink(link) == "lens"
    assert duck(out, "launches", "count(*)") == [(4,)]
    assert entries(tmp_path) == ["history", "lens", "link"]  # nothing staged is left beside it


def test_force_never_replaces_the_history_or_the_working_directory(
    small: Small, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = small.blobs.parent  # holds the blobs (and, on SQLite, the database file)
    before = entries(folder)
    line = one_line_error(export(small, "--dataset", folder, "--force"))
    assert line.endswith("; it is never replaced") and " holds the history" in line
    assert entries(folder) == before
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("")
    monkeypatch.chdir(work)
    line = one_line_error(export(small, "--dataset", ".", "--force"))
    assert line == f"tilelens: error: . holds the working directory ({os.getcwd()}); it is never replaced"
    assert entries(work) == ["a.txt"]


def test_a_failed_export_leaves_no_half_dataset(small: Small, tmp_path: Path) -> None:
    out = tmp_path / "lens"
    out.mkdir()
    (out / "old.txt").write_text("old")
    first = small.ids[0]
    with open_query(small.db, small.blobs) as q:
        blob = q.launch(first).trace["blob"]  # type: ignore[index]
    # add_kernel's 2-program trace: its first partition comes after the odd kernel's, already written then.
    (small.blobs / blob[:2] / blob).unlink()
    line = one_line_error(export(small, "--dataset", out, "--force"))
    assert line.startswith(f"tilelens: error: launch {first}'s access trace: "), line
    assert entries(out) == ["old.txt"]
    assert entries(tmp_path) == ["history", "lens"]


def test_a_history_older_than_the_late_columns_exports_them_as_null(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from alembic import command
    from alembic.config import Config

    from tilelens.config import resolve_location

    db, blobs = tmp_path / "h.db", tmp_path / "blobs"
    monkeypatch.setenv("TILELENS_DB", str(db))
    monkeypatch.setenv("TILELENS_BLOBS", str(blobs))
    with History.open(location=resolve_location()) as h:
        launch_id = h.write_launch(
            h.begin_run(store_helpers.run_info()), store_helpers.launch(trace=trace(2), test_nodeid="t.py::x")
        )
    command.downgrade(Config(str(Path(__file__).resolve().parents[2] / "alembic.ini")), "0002")
    out = tmp_path / "lens"
    proc = tilelens_in_process("export", "--dataset", out)
    assert proc.returncode == 0, proc.stderr
    (row,) = duck(out, "launches", "launch_id, lanes, test_nodeid, oob_load_lanes, gpu_name, trace_derived")
    assert row == (launch_id, 32, None, None, None, None)  # lanes: the hand-built summary's, not the trace's
    args = duck(out, "arguments", "name, storage_bytes, value_type, distinct_elements", "ORDER BY position")
    assert args == [("x_ptr", None, None, None), ("out_ptr", None, None, None), ("n", None, None, None),
                    ("BLOCK", None, None, None)]  # fmt: skip
    assert duck(out, "trace_lanes", "count(*)") == [(64,)]
    for table, schema in TABLES.items():
        assert all(pq.read_schema(f).equals(schema) for f in (out / table).rglob("*.parquet")), table


def test_an_interrupted_export_leaves_the_folder_as_it_was(
    small: Small, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the lanes are written (here: on the second trace read, files of the first partition
    already written): the staged dataset is removed, DIR keeps its old content."""
    from tilelens.store.files.blobs import BlobStore

    get_bytes = BlobStore.get_bytes
    reads: list[str] = []

    def interrupted(self: BlobStore, sha256: str) -> Any:
        reads.append(sha256)
        if len(reads) == 2:
            raise KeyboardInterrupt
        return get_bytes(self, sha256)

    out = tmp_path / "lens"
    out.mkdir()
    (out / "old.txt").write_text("old")
    monkeypatch.setattr(BlobStore, "get_bytes", interrupted)
    proc = export(small, "--dataset", out, "--force")
    assert (proc.returncode, len(reads)) == (130, 2)
    assert entries(out) == ["old.txt"]
    assert entries(tmp_path) == ["history", "lens"]


def test_the_folder_gets_mkdirs_permissions_or_keeps_its_own(small: Small, tmp_path: Path) -> None:
    """Not tempfile's 0700: a dataset is for other users and engines (a Spark job's account) to read."""
    old = os.umask(0o022)
    try:
        assert export(small, "--dataset", tmp_path / "new").returncode == 0
        mine = tmp_path / "mine"
        mine.mkdir(mode=0o750)
        mine.chmod(0o750)
        assert export(small, "--dataset", mine).returncode == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o755
    assert stat.S_IMODE(mine.stat().st_mode) == 0o750
    assert duck(mine, "launches", "count(*)") == [(6,)]
