"""``tilelens export``: a launch's access trace as one flat row per lane, for pandas, polars or DuckDB."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from tests.end_to_end.conftest import Recorded, one_line_error
from tilelens.store.lanes import LANE_SCHEMA

COLUMNS = [
    "launch_id",
    "pid_x",
    "pid_y",
    "pid_z",
    "event",
    "op",
    "arg",
    "arg_name",
    "line",
    "lane",
    "offset",
    "active",
    "oob",
]


def test_parquet_export_of_the_out_of_bounds_launch(examples_history: Recorded, tmp_path: Path) -> None:
    (launch_id,) = examples_history.ids["shift_kernel"]
    path = tmp_path / "lanes.parquet"
    proc = examples_history.cli("export", launch_id, "-o", path)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote 512 lanes of launch {launch_id} to {path} (parquet)" in proc.stderr
    table = pq.read_table(path)
    assert table.schema.names == COLUMNS == LANE_SCHEMA.names
    t = table.to_pydict()
    assert set(t["launch_id"]) == {launch_id}
    active = np.array(t["active"])
    oob = np.array(t["oob"])
    offset = np.array(t["offset"])
    load = np.array(t["op"]) == "load"
    assert (len(offset), int(active.sum()), int(oob.sum())) == (512, 456, 56)
    # The unmasked load of program 3 reads offsets 192..255 of x; 200..255 are past its end.
    assert sorted(set(offset[oob])) == list(range(200, 256))
    assert set(np.array(t["pid_x"])[oob]) == {3} and set(np.array(t["line"])[oob]) == {15}
    assert set(np.array(t["arg_name"])[load]) == {"x_ptr"} and set(np.array(t["arg_name"])[~load]) == {
        "out_ptr"
    }
    assert int(active[~load].sum()) == 200 and sorted(offset[~load & active]) == list(range(200))
    first = {name: t[name][0] for name in COLUMNS}
    assert first == {
        "launch_id": launch_id,
        "pid_x": 0,
        "pid_y": 0,
        "pid_z": 0,
        "event": 0,
        "op": "load",
        "arg": 0,
        "arg_name": "x_ptr",
        "line": 15,
        "lane": 0,
        "offset": 0,
        "active": True,
        "oob": False,
    }


def test_csv_export_matches_the_lanes_of_a_2d_launch(examples_history: Recorded, tmp_path: Path) -> None:
    launch_id = examples_history.ids["matmul_kernel"][-1]
    path = tmp_path / "mm.csv"
    out = examples_history.main("export", launch_id, "--format", "csv", "-o", path)
    assert out.returncode == 0, out.stderr
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == COLUMNS
    lanes, active = examples_history.rows(
        f"SELECT lanes, load_lanes + store_lanes FROM launches WHERE id = {launch_id}"
    )[0]
    assert len(rows) == lanes
    assert sum(r["active"] == "true" for r in rows) == active
    assert {(r["pid_x"], r["pid_y"]) for r in rows} == {("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")}


def test_default_output_name_and_errors(examples_history: Recorded, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.chdir(tmp_path)
    launch_id = examples_history.ids["add_kernel"][0]
    assert examples_history.main("export", launch_id).returncode == 0
    assert (tmp_path / f"launch-{launch_id}.parquet").is_file()
    line = one_line_error(examples_history.cli("export", 424242, "-o", tmp_path / "x.parquet"))
    assert "no launch 424242" in line
    assert not (tmp_path / "x.parquet").exists()
    line = one_line_error(examples_history.main("export", launch_id, "-o", tmp_path / "missing" / "x.csv"))
    assert "does not exist" in line
    assert examples_history.main("export", launch_id, "--format", "xlsx").returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"launch-{launch_id}.parquet"]
