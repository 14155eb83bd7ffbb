"""``pytest --tilelens``: every launch carries its test's node id, xdist workers included, and the session ends
with a TileLens summary. Each session runs as a subprocess of the test, with one small kernel.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.end_to_end.conftest import ROOT, tilelens, tilelens_in_process

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def inc_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def inc(x, n=None):
    n = x.numel() if n is None else n
    inc_kernel[(triton.cdiv(n, 64),)](x, n, BLOCK=64)
    return x
"""

TESTS = """
import pytest
import torch
from kern import inc


@pytest.mark.parametrize("times", [1, 2, 3, 4])
def test_inc(times):
    x = torch.zeros(100)
    for _ in range(times):
        inc(x)
    assert float(x.sum()) == 100 * times


def test_out_of_bounds():
    x = torch.zeros(100, dtype=torch.int32)
    inc(x[:50], n=70)  # lanes 50..69 are the neighbour's memory, inside one storage: not a crash
"""

# (nodeid, launches, oob lanes): what the tests above launch.
EXPECTED = [
    ("test_k.py::test_inc[1]", 1, 0),
    ("test_k.py::test_inc[2]", 2, 0),
    ("test_k.py::test_inc[3]", 3, 0),
    ("test_k.py::test_inc[4]", 4, 0),
    ("test_k.py::test_out_of_bounds", 1, 20 * 2),  # 20 lanes out of bounds, each loaded and stored
]


# For --tilelens-check: a clean test, a racing one, and one with out-of-bounds lanes.
RACE_KERNEL = """
@triton.jit
def same_block(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + tl.program_id(0) * BLOCK + offs))  # every program: y[0..15]
"""

CHECK_TESTS = """
import torch
from kern import inc, same_block


def test_clean():
    assert float(inc(torch.zeros(100)).sum()) == 100


def test_race():
    same_block[(2,)](torch.ones(32), torch.zeros(16), BLOCK=16)


def test_out_of_bounds():
    x = torch.zeros(100, dtype=torch.int32)
    inc(x[:50], n=70)
"""


def session(
    tmp_path: Path, *args: str, record: bool = False, kernel: str = KERNEL, tests: str = TESTS
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "kern.py").write_text(textwrap.dedent(kernel))
    (tmp_path / "test_k.py").write_text(textwrap.dedent(tests))
    argv = [
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "tilelens.pytest_plugin",
        *args,
        "test_k.py",
    ]
    if record:
        return tilelens(
            "--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs", "record", *argv, cwd=tmp_path
        )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TILELENS_BLOBS": str(tmp_path / "blobs")}
    return subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )


def rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def per_test(db: Path) -> list[tuple]:
    return rows(db, "SELECT test_nodeid, count(*), sum(oob_lanes) FROM launches GROUP BY 1 ORDER BY 1")


def test_xdist_workers_record_with_node_ids_and_fail_on_oob_fails_the_session(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    proc = session(tmp_path, "-n", "2", "--tilelens", f"--tilelens-db={db}", "--tilelens-fail-on-oob")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # every test passed; the OOB lanes fail it
    assert "5 passed" in proc.stdout
    assert per_test(db) == EXPECTED
    (session_run, *workers) = rows(db, "SELECT id, parent_run_id, status FROM runs ORDER BY id")
    assert session_run[1] is None and 1 <= len(workers) <= 2
    assert all(w[1] == session_run[0] and w[2] == "ok" for w in workers)
    assert rows(db, f"SELECT count(*) FROM launches WHERE run_id = {session_run[0]}") == [
        (0,)
    ]  # workers ran all
    summary = proc.stdout[proc.stdout.index("TileLens") :]
    assert f"run {session_run[0]} and {len(workers)} child run" in summary
    assert "11 launches of 1 kernel, 0 errors, 40 out-of-bounds lanes" in summary
    assert "test_k.py::test_out_of_bounds: 1 launch, 1 kernel, 40 OOB lanes" in summary
    assert "test_inc" not in summary  # only tests with out-of-bounds lanes are listed
    # a worker's sys.argv is ["-c"] (execnet starts `python -c`): ls --runs names the session it works for
    listed = tilelens_in_process("--db", db, "ls", "--runs").stdout
    assert listed.count(f"pytest-xdist worker of run {session_run[0]}: pytest -q ") == len(workers)
    assert "--tilelens-fail-on-oob" in summary
    # the launch's test is shown and filtered on by the read commands
    ls = tilelens("--db", db, "--blobs", tmp_path / "blobs", "ls", "--test", "*::test_inc[?]", "--json")
    assert ls.returncode == 0, ls.stderr
    assert ls.stdout.count('"test_nodeid": "test_k.py::test_inc[') == 10


def test_without_xdist_one_run_records_every_test_and_oob_alone_does_not_fail(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    proc = session(tmp_path, "-p", "no:xdist", "--tilelens", f"--tilelens-db={db}", "--tilelens-tag=ci")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert per_test(db) == EXPECTED
    assert rows(db, "SELECT id, parent_run_id, tag, status, exit_code FROM runs") == [
        (1, None, "ci", "ok", 0)
    ]
    assert rows(db, "SELECT seq FROM launches ORDER BY id") == [(i,) for i in range(11)]
    assert "run 1: 11 launches of 1 kernel, 0 errors, 40 out-of-bounds lanes" in proc.stdout


def test_tilelens_record_of_pytest_with_xdist_gets_node_ids_from_every_worker(tmp_path: Path) -> None:
    proc = session(tmp_path, "-n", "2", record=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert per_test(tmp_path / "h.db") == EXPECTED
    assert "11 launches of 1 kernel" in proc.stderr


def test_check_fails_each_test_whose_launches_have_findings_with_them_in_its_report(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    proc = session(
        tmp_path,
        "-n",
        "2",
        "--tilelens-check",
        f"--tilelens-db={db}",
        kernel=KERNEL + RACE_KERNEL,
        tests=CHECK_TESTS,
    )
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "2 failed, 1 passed" in out
    assert "FAILED test_k.py::test_race" in out and "FAILED test_k.py::test_out_of_bounds" in out
    assert "tilelens check: findings in this test's launches" in out
    assert (
        "write-write  y_ptr: 16 elements of 16 written by several programs with plain stores: "
        "y_ptr[0], y_ptr[1], y_ptr[2] ... y_ptr[15]"
    ) in out
    # inc on a 50-element view of n=70: lanes 50..63 of program 0 and 64..69 of program 1, loaded and stored
    assert "out-of-bounds  x_ptr: 20 lanes in 2 events outside the view, element offsets 50..69" in out
    assert per_test(db) == [
        ("test_k.py::test_clean", 1, 0),
        ("test_k.py::test_out_of_bounds", 1, 40),
        ("test_k.py::test_race", 1, 0),
    ]
