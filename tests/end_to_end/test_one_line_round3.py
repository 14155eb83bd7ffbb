"""Bad input and Ctrl-C give one line, not a traceback, and lose nothing (issue 47, point 11)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests import store_helpers
from tests.end_to_end.conftest import Recorded, default_signals, one_line_error, tilelens_in_process
from tilelens.config import resolve_location
from tilelens.errors import UsageError
from tilelens.store import History

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small(tmp_path: Path) -> list[object]:
    """A SQLite history with two finished runs of two launches each, traces and tensors."""
    with History.open(location=resolve_location(str(tmp_path / "h.db"), tmp_path / "blobs", env={})) as h:
        for _ in range(2):
            run = h.begin_run(store_helpers.run_info())
            for i in range(2):
                x = torch.arange(64, dtype=torch.float32) + i
                h.write_launch(
                    run,
                    store_helpers.launch(
                        x, torch.zeros(64), x * 2, trace=store_helpers.trace_table(8), seq=i
                    ),
                )
            h.finish_run(run, "ok", 0)
    return ["--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs"]


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf"])
@pytest.mark.parametrize("option", ["--atol", "--rtol"])
def test_replay_refuses_a_tolerance_that_is_no_tolerance(
    small: list[object], option: str, value: str
) -> None:
    line = one_line_error(tilelens_in_process(*small, "replay", "1", f"{option}={value}"))
    assert option in line and "finite number >= 0" in line


def test_the_replay_api_refuses_it_too(small: list[object]) -> None:
    from tilelens.replay import replay_launch

    location = resolve_location(str(small[1]), small[3], env={})
    with (
        History.open_existing(location=location) as h,
        pytest.raises(UsageError, match="atol must be a finite number >= 0"),
    ):
        replay_launch(h, 1, atol=float("nan"))


@pytest.mark.parametrize("query", ["", "   ", ";", " -- only a comment", "/* nothing */ ;"])
def test_sql_without_a_statement_is_an_error_as_with_stdin(small: list[object], query: str) -> None:
    line = one_line_error(tilelens_in_process(*small, "sql", query))
    assert line == "tilelens: error: no query given (an empty statement, or only comments)"


def test_export_does_not_replace_a_read_only_file(examples_recording: Recorded, tmp_path: Path) -> None:
    where = ["--db", examples_recording.db, "--blobs", examples_recording.blobs]
    launch = next(iter(examples_recording.ids.values()))[0]
    target = tmp_path / "kept.parquet"
    target.write_bytes(b"keep me")
    os.chmod(target, 0o444)
    line = one_line_error(tilelens_in_process(*where, "export", launch, "-o", target))
    assert "is read-only" in line
    assert target.read_bytes() == b"keep me" and (target.stat().st_mode & 0o777) == 0o444
    os.chmod(target, 0o644)  # writable again: replaced as before
    res = tilelens_in_process(*where, "export", launch, "-o", target)
    assert res.returncode == 0, res.stderr
    assert target.read_bytes() != b"keep me"


# Ctrl-C at the very moment gc commits (a wrapper sends SIGINT to its own process from inside the commit).
GC_WRAPPER = """
import os, signal, sys
from sqlalchemy.engine import default

original = default.DefaultDialect.do_commit
fired = []

def do_commit(self, dbapi_connection):
    if not fired:
        fired.append(1)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as the driver commits
    return original(self, dbapi_connection)

default.DefaultDialect.do_commit = do_commit
from tilelens.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_during_gc_commit_is_one_line_and_keeps_the_history_whole(
    small: list[object], tmp_path: Path
) -> None:
    wrapper = tmp_path / "wrap.py"
    wrapper.write_text(GC_WRAPPER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, str(wrapper), *map(str, small), "gc", "--untagged", "--grace", "0"]
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=300, check=False, preexec_fn=default_signals
    )
    assert proc.returncode == 130, proc.stderr  # as a shell reports Ctrl-C
    assert "Traceback" not in proc.stderr and "closed database" not in proc.stderr, proc.stderr
    conn = sqlite3.connect(str(small[1]))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()
    # The next gc finishes the job.
    res = tilelens_in_process(*small, "gc", "--untagged", "--grace", "0")
    assert res.returncode == 0, res.stderr


THREADS_AFTER = """
import contextlib, io, os, sys
import pyarrow  # its jemalloc thread starts at import: the baseline
from tilelens.cli import main

def native_threads():
    return sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))

before = native_threads()
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(code, before == native_threads(), native_threads())
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc")
def test_diff_starts_no_arrow_thread_pool_that_could_abort_the_exit(examples_recording: Recorded) -> None:
    """``diff 1 2 --json`` once died "terminate called without an active exception" (exit 134): Arrow's CPU
    thread pool, started by a threaded blob read, torn down by static destructors while its threads ran.
    Reads of a history are single-threaded, so that pool is never started by TileLens."""
    where = ["--db", str(examples_recording.db), "--blobs", str(examples_recording.blobs)]
    first, second = examples_recording.ids["scale_kernel"][:2]
    matmul = examples_recording.ids["matmul_kernel"][-1]
    for argv in (
        ["diff", str(first), str(second), "--json"],
        ["diff", str(first), str(matmul), "--json"],
        ["show", str(matmul)],
    ):
        proc = subprocess.run(
            [sys.executable, "-c", THREADS_AFTER, *where, *argv],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        code, same, threads = proc.stdout.split(" ", 2)
        assert code in ("0", "1") and same == "True", (argv, threads)
