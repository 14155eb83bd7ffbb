"""A recording whose process dies: SIGTERM and SIGHUP finish the run, SIGKILL and os._exit leave it ``lost``.

Each test runs ``tilelens record`` as a real process that records one launch, says "ready" and waits to be
ended; then it is ended the way the test names, and the history is read as a user would.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.end_to_end.conftest import default_signals, run_row, tilelens, tilelens_argv
from tests.end_to_end.test_cli_record import KERNEL, write

PROGRAM = """
import os, sys, time
import torch
from kernels import inc

inc(torch.zeros(100))
if sys.argv[1] == "exit":
    print("ready", flush=True)
    os._exit(3)
try:
    print("ready", flush=True)  # inside: the signal may come at once
    sys.stdin.read()  # until the test ends us (or closes stdin)
finally:
    print("finally", flush=True)
"""


def _record(tmp_path: Path, mode: str, db: str) -> tuple[subprocess.Popen[str], str]:
    write(tmp_path / "kernels.py", KERNEL)
    script = write(tmp_path / "prog.py", PROGRAM)
    proc = subprocess.Popen(
        [*tilelens_argv(), "--db", db, "record", str(script), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != "ready\n":
        proc.kill()
        raise AssertionError((line, proc.communicate()))
    return proc, db


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_finish_the_run_then_end_by_the_signal(
    tmp_path: Path, history_url: str, sig: signal.Signals
) -> None:
    proc, db = _record(tmp_path, "wait", history_url)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -sig  # ended by the signal itself, as without TileLens
    assert out == "finally\n"  # the program unwinds (as for Ctrl-C), then the process ends
    assert f"{sig.name} ended the program; the run is marked terminated" in err
    assert "run 1: 1 launch of 1 kernel" in err
    assert run_row(db) == ("terminated", 128 + sig, 1)
    (run,) = json.loads(tilelens("--db", db, "ls", "--runs", "--json").stdout)
    assert (run["status"], run["exit_code"], run["launches"]) == ("terminated", 128 + sig, 1)


@pytest.mark.parametrize("how", ["SIGKILL", "os._exit"])
def test_killed_runs_show_as_lost_and_the_next_writer_stores_it(
    tmp_path: Path, history_url: str, how: str
) -> None:
    proc, db = _record(tmp_path, "exit" if how == "os._exit" else "wait", history_url)
    if how == "SIGKILL":
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == (-signal.SIGKILL if how == "SIGKILL" else 3)
    assert out == "" and "tilelens: run" not in err  # no summary: nothing ran after the process died
    assert run_row(db) == ("running", None, 1)  # what the dead process left behind

    (run,) = json.loads(tilelens("--db", db, "ls", "--runs", "--json").stdout)
    assert (run["status"], run["launches"]) == ("lost", 1)  # shown at once, without writing
    table = tilelens("--db", db, "ls", "--runs", "--status", "lost").stdout
    assert " lost" in table and "prog.py" in table
    assert run_row(db) == ("running", None, 1)

    assert tilelens("--db", db, "db", "upgrade").returncode == 0  # any writer opening the history
    assert run_row(db) == ("lost", None, 1)
    view = tilelens("--db", db, "sql", "SELECT status, launches FROM run_overview", "--format", "json")
    assert json.loads(view.stdout) == [{"status": "lost", "launches": 1}]
