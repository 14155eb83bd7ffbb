"""A forked child that opened its history while the parent lived keeps writing after the parent has ended.

SQLite's per-file lock bookkeeping lives in process memory and is copied by ``fork()`` without the POSIX locks
behind it: a child forked while the parent held a connection believed it held locks it did not, the parent's
last close then checkpointed and deleted the write-ahead log under it, and the child's later launches were
lost (its run stayed ``running`` with only its first launch). ``children._before_fork`` closes the parent's
idle connections at each fork; this program fails without it.
"""

from __future__ import annotations

import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

from tests.end_to_end.conftest import tilelens_argv

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def inc_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def work(blocks):
    x = torch.zeros(64 * blocks)
    inc_kernel[(blocks,)](x, x.numel(), BLOCK=64)
    return float(x.sum())
"""

# grid_x tells the launches apart: 1 and 2 the parent's, 11 the child's while the parent lives, 12 and 13 the
# child's after the parent's recording has ended (the test creates "go" once `tilelens record` has returned).
PROGRAM = """
import os, time
from kern import work

work(1)
if os.fork() == 0:
    work(11)
    open("child-first", "w").close()
    while not os.path.exists("go"):
        time.sleep(0.02)
    total = work(12) + work(13)
    with open("child-done", "w") as f:
        f.write(repr(total))
    os._exit(0)
while not os.path.exists("child-first"):
    time.sleep(0.02)
work(2)
"""


def test_a_fork_outliving_its_parent_loses_no_launch(tmp_path: Path) -> None:
    (tmp_path / "kern.py").write_text(textwrap.dedent(KERNEL))
    (tmp_path / "prog.py").write_text(textwrap.dedent(PROGRAM))
    db = tmp_path / "h.db"
    log = tmp_path / "record.log"
    with log.open("w") as out:  # a file, not a pipe: the child holds its copy open after the parent exits
        argv = [*tilelens_argv(), "--db", str(db), "--blobs", str(tmp_path / "blobs"), "record", "prog.py"]
        code = subprocess.call(argv, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, timeout=600)
    assert code == 0, log.read_text()
    (tmp_path / "go").touch()
    done = tmp_path / "child-done"
    for _ in range(1200):  # the child's two launches after the parent (not a timing assertion)
        if done.exists() and done.read_text():
            break
        time.sleep(0.05)
    assert done.read_text() == repr(float(64 * 12 + 64 * 13))

    with sqlite3.connect(db) as c:
        runs = c.execute("SELECT id, parent_run_id FROM runs ORDER BY id").fetchall()
        launches = c.execute("SELECT run_id, grid_x, seq, status FROM launches ORDER BY id").fetchall()
        integrity = c.execute("PRAGMA integrity_check").fetchall()
    assert runs == [(1, None), (2, 1)]
    assert launches == [
        (1, 1, 0, "ok"),
        (2, 11, 0, "ok"),
        (1, 2, 1, "ok"),
        (2, 12, 1, "ok"),
        (2, 13, 2, "ok"),
    ]
    assert integrity == [("ok",)]
