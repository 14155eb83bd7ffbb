"""Child processes record into the same history: runs of their own, linked to their parent's run.

Every program here runs as a subprocess of the test (``tilelens record`` or ``pytest``), with one small kernel;
launch sizes tell the children apart (``grid_x`` is the size in blocks of 64).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.end_to_end.conftest import ROOT, tilelens
from tilelens.core.recording import children
from tilelens.replay import replay_launch
from tilelens.store import History

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def inc_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@triton.jit
def spin_kernel(x_ptr):
    while tl.load(x_ptr) == 0:  # nothing writes x: the launch never returns
        pass


def work(blocks, times=1):
    x = torch.zeros(64 * blocks)
    for _ in range(times):
        inc_kernel[(blocks,)](x, x.numel(), BLOCK=64)
    return float(x.sum())


def spin(marker):
    def grid(meta):  # Triton calls the grid inside the launch: the marker says the launch has begun
        open(marker, "w").close()
        return (10,)

    spin_kernel[grid](torch.zeros(1, dtype=torch.int32))
"""

# One recorded program with every kind of child; launch sizes (grid_x, in blocks of 64) tell them apart:
# 1 the parent, 2 a subprocess, 3 a fork leaving by os._exit, 4/5/6 spawn/fork/forkserver pools, 7 a child
# with TILELENS_DISABLE=1, 8 a subprocess that outlives the parent, 9 a subprocess SIGKILLed inside its 5th launch.
PROGRAM = """
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

from kern import work


def task(args):
    return work(*args)


def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.02)


if __name__ == "__main__":
    assert work(1, 2) == 128.0  # parent: 2 launches of 1 block
    out = subprocess.run(
        [sys.executable, "-c", "from kern import work; print(work(2, 3))"], capture_output=True, text=True
    )
    assert out.stdout.strip() == "384.0", out
    pid = os.fork()
    if pid == 0:  # leaves without exit handlers, after 2 launches of 3 blocks
        work(3, 2)
        os._exit(5)
    assert os.waitpid(pid, 0)[1] >> 8 == 5
    for blocks, method in ((4, "spawn"), (5, "fork"), (6, "forkserver")):
        with mp.get_context(method).Pool(1) as pool:  # 1 + 2 + 3 = 6 launches per pool; ended by terminate
            assert pool.map(task, [(blocks, 1), (blocks, 2), (blocks, 3)]) == [64.0 * blocks * t for t in (1, 2, 3)]
    disabled = subprocess.run(
        [sys.executable, "-c", "from kern import work; print(work(7))"],
        env={**os.environ, "TILELENS_DISABLE": "1", "TRITON_INTERPRET": "1"}, capture_output=True, text=True,
    )  # unrecorded, so Triton's own interpreter runs it (this machine has no GPU)
    assert disabled.stdout.strip() == "448.0", disabled
    victim = subprocess.Popen([sys.executable, "-c", "from kern import work, spin; work(9, 4); spin('inside')"])
    wait_for("inside")
    os.kill(victim.pid, signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    subprocess.Popen([sys.executable, "orphan.py", str(os.getpid())])  # outlives this process
    wait_for("orphan-launched")
    print("done")
"""

# A started child that outlives the recorded program: it launches, then looks at its own run once the
# program has ended (a forked one could not: see the report on SQLite connections across fork).
ORPHAN = """
import os, sqlite3, sys, time
from kern import work
from tilelens.core import session

work(8)
open("orphan-launched", "w").close()
while os.getppid() == int(sys.argv[1]):
    time.sleep(0.02)
conn = sqlite3.connect("h.db")
[(status,)] = conn.execute("SELECT status FROM runs WHERE id = ?", (session.active().run_id,)).fetchall()
conn.close()
with open("orphan-saw", "w") as f:
    f.write(status)
"""


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


@dataclass(frozen=True)
class Recorded:
    path: Path
    db: Path
    proc: subprocess.CompletedProcess[str]
    run_of_size: dict[int, set[int]]  # grid_x -> the runs with launches of that size


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """PROGRAM, recorded once: every test below asserts on this one history (children import torch: slow)."""
    tmp_path = tmp_path_factory.mktemp("children")
    write(tmp_path / "kern.py", KERNEL)
    write(tmp_path / "prog.py", PROGRAM)
    write(tmp_path / "orphan.py", ORPHAN)
    db = tmp_path / "h.db"
    proc = tilelens("--db", db, "--blobs", tmp_path / "blobs", "record", "prog.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for _ in range(600):  # the orphan ends on its own after the parent; wait for it (not a timing assertion)
        if (tmp_path / "orphan-saw").exists() and rows(
            db, "SELECT 1 FROM runs WHERE status = 'running'"
        ) == []:
            break
        time.sleep(0.1)
    run_of_size: dict[int, set[int]] = {}
    for run_id, blocks in rows(db, "SELECT DISTINCT run_id, grid_x FROM launches"):
        run_of_size.setdefault(blocks, set()).add(run_id)
    return Recorded(tmp_path, db, proc, run_of_size)


def test_every_kind_of_child_records_a_run_of_its_own_linked_to_the_parent(recorded: Recorded) -> None:
    db, proc = recorded.db, recorded.proc
    assert proc.stdout.strip() == "done"
    runs = rows(db, "SELECT id, parent_run_id, pid FROM runs ORDER BY id")
    (parent, *kids) = runs
    assert parent == (1, None, parent[2])
    assert kids and all(k[1] == 1 for k in kids)  # every child links to the recorded program's run
    assert len({k[2] for k in runs}) == len(runs)  # each run is its own process
    # launches per size (the child that made them): exact, none lost, none in the parent's run but its own
    per_run = rows(
        db, "SELECT run_id, grid_x, count(*), count(DISTINCT seq), min(seq) FROM launches GROUP BY 1, 2"
    )
    assert [r for r in per_run if r[0] == 1] == [(1, 1, 2, 2, 0)]
    totals: dict[int, int] = {}
    for run_id, blocks, n, distinct_seq, first_seq in per_run:
        assert distinct_seq == n and first_seq == 0 and run_id != 1 or blocks == 1
        totals[blocks] = totals.get(blocks, 0) + n
    # TILELENS_DISABLE=1: no launch of 7 blocks; the killed child's spinning launch (10 blocks): not stored
    assert totals == {1: 2, 2: 3, 3: 2, 4: 6, 5: 6, 6: 6, 8: 1, 9: 4}
    assert {b: len(r) for b, r in recorded.run_of_size.items()} == {b: 1 for b in totals}
    assert "30 launches of 1 kernel" in proc.stderr
    assert f"run 1 and {len(kids)} child runs" in proc.stderr
    # a child that ran no Triton launch (the forkserver itself, the disabled child) left no run
    assert len(kids) == len(totals) - 1


def _status(recorded: Recorded, blocks: int) -> tuple:
    (run_id,) = recorded.run_of_size[blocks]
    return tuple(rows(recorded.db, f"SELECT status, exit_code FROM runs WHERE id = {run_id}")[0])


def test_the_recording_closes_its_gone_children_as_lost_and_leaves_live_ones_running(
    recorded: Recorded,
) -> None:
    assert _status(recorded, 1) == ("ok", 0)
    assert _status(recorded, 2) == ("ok", None)  # a child that ended normally wrote its own status
    # os._exit and SIGKILL end a child without that write: the parent's end closes them as lost
    assert _status(recorded, 3) == _status(recorded, 9) == ("lost", None)
    # Pool.terminate: a worker SIGTERMed before it read the pool's stop sentinel is lost, one that read it
    # ended its run itself; none is left running
    for blocks in (4, 5, 6):
        assert _status(recorded, blocks) in {("lost", None), ("ok", None)}, blocks
    # the orphan was alive when the parent ended: it saw its run still running, then finished it itself
    assert (recorded.path / "orphan-saw").read_text() == "running"
    assert _status(recorded, 8) == ("ok", None)


def test_a_child_killed_inside_a_launch_loses_only_that_launch(recorded: Recorded) -> None:
    db = recorded.db
    (victim,) = recorded.run_of_size[9]
    # its four finished launches are stored, in order; the fifth (spin_kernel, 10 blocks) never returned
    assert rows(db, f"SELECT seq, grid_x, status FROM launches WHERE run_id = {victim} ORDER BY id") == [
        (i, 9, "ok") for i in range(4)
    ]
    assert rows(db, "SELECT count(*) FROM launches WHERE grid_x = 10") == [(0,)]
    assert rows(db, "SELECT count(*) FROM kernels WHERE qualname = 'spin_kernel'") == [(0,)]
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
    assert rows(db, "PRAGMA foreign_key_check") == []
    shas = rows(
        db,
        f"SELECT trace_blob FROM launches WHERE run_id = {victim} AND trace_blob IS NOT NULL UNION "
        f"SELECT before_blob FROM launch_args a JOIN launches l ON l.id = a.launch_id WHERE l.run_id = {victim} "
        f"AND before_blob IS NOT NULL UNION SELECT after_blob FROM launch_args a JOIN launches l "
        f"ON l.id = a.launch_id WHERE l.run_id = {victim} AND after_blob IS NOT NULL",
    )
    assert len(shas) >= 4
    (last,) = rows(db, f"SELECT max(id) FROM launches WHERE run_id = {victim}")[0]
    history = History.open(f"sqlite:///{db}", recorded.path / "blobs")
    try:
        for (sha,) in shas:
            history.blobs.verify(sha)  # raises on a missing or corrupt blob
        replayed = replay_launch(history, last)  # in this process: no fresh torch import
    finally:
        history.close()
    assert (replayed.outcome, replayed.trace_equal) == ("match", True), replayed.message


def _python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_a_child_that_cannot_reach_the_history_says_one_line_and_runs_unrecorded(tmp_path: Path) -> None:
    write(tmp_path / "kern.py", KERNEL)
    (tmp_path / "not-a-db").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(children.FALLBACK_DIR), str(ROOT)]),
        "TRITON_INTERPRET": "1",  # unrecorded, Triton's own interpreter runs the kernel (no GPU here)
        children.ENV: json.dumps(
            {"db": f"sqlite:///{tmp_path / 'not-a-db'}", "blobs": str(tmp_path), "run": 1}
        ),
    }
    proc = _python("from kern import work; print(work(2, 3))", env, tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "384.0\n"), proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"tilelens: process {proc.stderr.split()[2]}") and "not recorded" in line


def test_the_start_up_hook_costs_nothing_when_not_asked_for(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != children.ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(children.FALLBACK_DIR), str(ROOT)])
    code = (
        "import sys; print(sorted(m for m in sys.modules if m.startswith(('tilelens', 'torch', 'triton'))))"
    )
    assert _python(code, env, tmp_path).stdout == "[]\n"
    # the .pth line itself, executed as site executes it: nothing imported without the variable
    namespace: dict[str, object] = {}
    before = set(sys.modules)
    saved = os.environ.pop(children.ENV, None)
    try:
        exec(children.HOOK_LINE, namespace)
    finally:
        if saved is not None:
            os.environ[children.ENV] = saved
    assert set(sys.modules) == before
