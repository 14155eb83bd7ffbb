"""``tilelens export``: a launch's access trace as one flat row per lane, for pandas, polars or DuckDB."""

from __future__ import annotations

import csv
import os
import stat
import subprocess
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.end_to_end.conftest import Recorded, one_line_error, tilelens_argv
from tilelens.store.files.lanes import LANE_SCHEMA

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


# -- destinations: never replace what PATH is (issue 12, item 1) ---------------------------------------------


def _csv_of(recorded: Recorded, launch_id: int, folder: Path) -> bytes:
    """The export written to a plain new file: what every other destination must receive."""
    path = folder / f"reference-{launch_id}.csv"
    assert recorded.main("export", launch_id, "-f", "csv", "-o", path).returncode == 0
    return path.read_bytes()


def test_export_writes_through_a_symlinked_fifo_read_by_a_thread(
    examples_history: Recorded, tmp_path: Path
) -> None:
    launch_id = examples_history.ids["add_kernel"][0]
    expected = _csv_of(examples_history, launch_id, tmp_path)
    fifo = tmp_path / "lanes.fifo"
    os.mkfifo(fifo)
    link = tmp_path / "out.csv"
    link.symlink_to(fifo.name)  # relative, as `ln -s lanes.fifo out.csv` makes it
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    out = examples_history.main("export", launch_id, "-f", "csv", "-o", link)
    reader.join(timeout=60)
    if reader.is_alive():  # nothing was written to the FIFO: release the reader so the test ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(timeout=60)
    assert out.returncode == 0, out.stderr
    assert received == [expected]
    assert link.is_symlink() and os.readlink(link) == fifo.name
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "lanes.fifo",
        "out.csv",
        f"reference-{launch_id}.csv",
    ]


def test_export_through_a_symlink_replaces_the_target_and_keeps_the_link(
    examples_history: Recorded, tmp_path: Path
) -> None:
    launch_id = examples_history.ids["shift_kernel"][0]
    data, links = tmp_path / "data", tmp_path / "links"
    data.mkdir()
    links.mkdir()
    target = data / "lanes.parquet"
    target.write_bytes(b"old content")
    target.chmod(0o640)
    link = links / "lanes.parquet"
    link.symlink_to(Path("..") / "data" / "lanes.parquet")
    before = os.stat(target)
    out = examples_history.main("export", launch_id, "-o", link)
    assert out.returncode == 0, out.stderr
    assert link.is_symlink() and os.readlink(link) == str(Path("..") / "data" / "lanes.parquet")
    after = os.stat(target)
    assert after.st_ino != before.st_ino  # renamed into place: whole or not at all
    assert stat.S_IMODE(after.st_mode) == 0o640
    assert pq.read_table(target).num_rows == 512
    assert sorted(p.name for p in data.iterdir()) == ["lanes.parquet"]
    assert sorted(p.name for p in links.iterdir()) == ["lanes.parquet"]


def _device(folder: Path, name: str, minor: int) -> Path:
    """A character device to export to: /dev's own for a normal user (who cannot replace nodes in /dev), a
    private copy made with mknod for root, so that a regression cannot replace the machine's /dev/full."""
    if os.geteuid() != 0:
        return Path("/dev") / name
    node = folder / name
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("root without CAP_MKNOD: no private device node to write to")
    return node


def test_export_to_a_full_device_is_one_line_and_the_device_stays(
    examples_history: Recorded, tmp_path: Path
) -> None:
    launch_id = examples_history.ids["add_kernel"][0]
    devices = tmp_path / "dev"
    devices.mkdir()
    full, null = _device(devices, "full", 7), _device(devices, "null", 3)
    link = tmp_path / "full.csv"
    link.symlink_to(full)
    for target in (full, link):
        line = one_line_error(examples_history.main("export", launch_id, "-f", "csv", "-o", target))
        assert "No space left on device" in line
    assert stat.S_ISCHR(os.lstat(full).st_mode) and link.is_symlink()
    assert examples_history.main("export", launch_id, "-o", null).returncode == 0
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev", "full.csv"]
    if full.parent == devices:
        assert sorted(p.name for p in devices.iterdir()) == ["full", "null"]


def _parquet_of(recorded: Recorded, launch_id: int, folder: Path) -> Path:
    path = folder / "reference.parquet"
    assert recorded.main("export", launch_id, "-o", path).returncode == 0
    return path


def _export_bytes(
    recorded: Recorded, *args: object, stdout: Any = subprocess.PIPE
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*tilelens_argv(), *(str(a) for a in (*recorded.location, "export", *args))],
        stdout=stdout,
        stderr=subprocess.PIPE,
        timeout=600,
    )


def test_export_dash_streams_csv_and_parquet_to_standard_output(
    examples_history: Recorded, tmp_path: Path
) -> None:
    launch_id = examples_history.ids["shift_kernel"][0]
    expected = _csv_of(examples_history, launch_id, tmp_path)
    csv_proc = _export_bytes(examples_history, launch_id, "-f", "csv", "-o", "-")
    assert csv_proc.returncode == 0 and csv_proc.stdout == expected
    assert f"wrote 512 lanes of launch {launch_id} to standard output (csv)" in csv_proc.stderr.decode()
    parquet_proc = _export_bytes(examples_history, launch_id, "-o", "-")
    assert parquet_proc.returncode == 0, parquet_proc.stderr
    table = pq.ParquetFile(pa.BufferReader(parquet_proc.stdout)).read()
    reference = pq.read_table(_parquet_of(examples_history, launch_id, tmp_path))
    assert table.equals(reference)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"reference-{launch_id}.csv", "reference.parquet"]


def test_export_to_a_link_to_this_process_stdout_honours_the_shell_redirection(
    examples_history: Recorded, tmp_path: Path
) -> None:
    launch_id = examples_history.ids["add_kernel"][0]
    expected = _csv_of(examples_history, launch_id, tmp_path)
    # `ln -s /proc/self/fd/1 out.csv; tilelens export N -o out.csv | wc -c` (what /dev/stdout is, too)
    link = tmp_path / "out.csv"
    link.symlink_to("/proc/self/fd/1")
    piped = _export_bytes(examples_history, launch_id, "-f", "csv", "-o", link)
    assert piped.returncode == 0 and piped.stdout == expected
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    log = tmp_path / "log.csv"
    log.write_bytes(b"earlier line\n")
    with log.open("ab") as appended:  # `>> log.csv`: the export lands after what the file held
        proc = _export_bytes(examples_history, launch_id, "-f", "csv", "-o", link, stdout=appended)
    assert proc.returncode == 0, proc.stderr
    assert log.read_bytes() == b"earlier line\n" + expected
