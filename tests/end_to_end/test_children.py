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
from pathlib import Path

from tests.end_to_end.conftest import ROOT, tilelens
from tilelens.core import children

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def inc_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def work(blocks, times=1):
    x = torch.zeros(64 * blocks)
    for _ in range(times):
        inc_kernel[(blocks,)](x, x.numel(), BLOCK=64)
    return float(x.sum())
"""

PROGRAM = """
import multiprocessing as mp
import os
import subprocess
import sys

from kern import work


def task(args):
    return work(*args)


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
        with mp.get_context(method).Pool(2) as pool:  # 1 + 2 + 3 = 6 launches per pool
            assert pool.map(task, [(blocks, 1), (blocks, 2), (blocks, 3)]) == [64.0 * blocks * t for t in (1, 2, 3)]
    disabled = subprocess.run(
        [sys.executable, "-c", "from kern import work; print(work(7))"],
        env={**os.environ, "TILELENS_DISABLE": "1", "TRITON_INTERPRET": "1"}, capture_output=True, text=True,
    )  # unrecorded, so Triton's own interpreter runs it (this machine has no GPU)
    assert disabled.stdout.strip() == "448.0", disabled
    print("done")
"""


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()


def test_every_kind_of_child_records_a_run_of_its_own_linked_to_the_parent(tmp_path: Path) -> None:
    write(tmp_path / "kern.py", KERNEL)
    write(tmp_path / "prog.py", PROGRAM)
    db = tmp_path / "h.db"
    proc = tilelens("--db", db, "--blobs", tmp_path / "blobs", "record", "prog.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "done"
    runs = rows(db, "SELECT id, parent_run_id, pid, status, exit_code FROM runs ORDER BY id")
    (parent, *kids) = runs
    assert parent[1:2] == (None,) and parent[3:] == ("ok", 0)
    assert kids and all(k[1] == parent[0] for k in kids)  # every child links to the recorded program's run
    assert len({k[2] for k in runs}) == len(runs)  # each run is its own process
    # launches per size (the child that made them): exact, none lost, none in the parent's run but its own
    per_run = rows(
        db, "SELECT run_id, grid_x, count(*), count(DISTINCT seq), min(seq) FROM launches GROUP BY 1, 2"
    )
    assert [r for r in per_run if r[0] == parent[0]] == [(parent[0], 1, 2, 2, 0)]
    totals: dict[int, int] = {}
    for run_id, blocks, n, distinct_seq, first_seq in per_run:
        assert distinct_seq == n and first_seq == 0 and run_id != parent[0] or blocks == 1
        totals[blocks] = totals.get(blocks, 0) + n
    assert totals == {1: 2, 2: 3, 3: 2, 4: 6, 5: 6, 6: 6}  # TILELENS_DISABLE=1: no launch of 7 blocks
    runs_per_size = dict(rows(db, "SELECT grid_x, count(DISTINCT run_id) FROM launches GROUP BY 1"))
    assert runs_per_size[2] == runs_per_size[3] == 1 and 1 <= runs_per_size[4] <= 2
    assert "25 launches of 1 kernel" in proc.stderr
    assert f"run {parent[0]} and {len(kids)} child run" in proc.stderr
    # a child that ran no Triton launch (the forkserver itself, the disabled child) left no run
    assert len(kids) == sum(runs_per_size[b] for b in (2, 3, 4, 5, 6))


FORK_OUTLIVES = """
import os
import sys
import time

from kern import work

work(1)
parent = os.getpid()
if os.fork() == 0:
    while os.getppid() == parent:  # until the recording parent has exited
        time.sleep(0.05)
    work(2)
    open("child-done", "w").close()
    sys.exit(3)
"""


def test_a_fork_that_outlives_the_parent_never_changes_the_parents_run(tmp_path: Path) -> None:
    write(tmp_path / "kern.py", KERNEL)
    write(tmp_path / "prog.py", FORK_OUTLIVES)
    db = tmp_path / "h.db"
    proc = tilelens("--db", db, "--blobs", tmp_path / "blobs", "record", "prog.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for _ in range(1200):  # the orphan finishes on its own; wait for it (not a timing assertion)
        if (tmp_path / "child-done").exists() and rows(db, "SELECT status FROM runs WHERE id = 2") == [
            ("failed",)
        ]:
            break
        time.sleep(0.1)
    assert rows(db, "SELECT id, parent_run_id, status, exit_code FROM runs ORDER BY id") == [
        (1, None, "ok", 0),
        (2, 1, "failed", 3),
    ]
    assert rows(db, "SELECT run_id, grid_x, seq FROM launches ORDER BY id") == [(1, 1, 0), (2, 2, 0)]


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
