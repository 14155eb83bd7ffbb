"""A signal always ends a recorded run as ``interrupted``/``terminated`` with 130/128+N, and the history stores
the status the process really exits with (issue 47, points 5, 6, 10 and the Ctrl-C cases of 11).

Each case is deterministic: the program says where it is on stdout and the test sends the signal then (a
``__del__`` that sleeps, an atexit callback that sleeps), or a small wrapper around ``tilelens`` sends the
signal to its own process at the exact moment under test (while Triton is imported, as the run is finished,
during SQLAlchemy's pool pre-ping), so nothing depends on timing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.end_to_end.conftest import default_signals, run_row, tilelens_argv
from tests.end_to_end.test_cli_record import KERNEL, write

ROOT = Path(__file__).resolve().parents[2]

# A program that records one launch, then gets into a callback python runs for it (a __del__, a weakref
# callback), says so, and sleeps there until the test's signal comes. Without TileLens's care the signal's
# exception was dropped ("Exception ignored in ...") and the program went on to launch 20 more times.
SWALLOWING = """
import sys, time, weakref
import torch
from kernels import inc

x = torch.zeros(100)
inc(x)

class Slow:
    def __del__(self):
        print("inside", flush=True)
        time.sleep(600)

def callback(_ref):
    print("inside", flush=True)
    time.sleep(600)

def swallowed():
    try:
        print("inside", flush=True)
        time.sleep(600)
    except BaseException:
        pass

kind = sys.argv[1]
if kind == "del":
    s = Slow()
    del s
elif kind == "weakref":
    s = Slow.__new__(type("Plain", (), {}))
    r = weakref.ref(s, callback)
    del s
else:
    swallowed()
for _ in range(20):
    inc(x)
"""


def _popen(argv: list[str], **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
        **kwargs,  # type: ignore[call-overload]
    )


def _wait_for(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != f"{word}\n":
        proc.kill()
        raise AssertionError((line, proc.communicate()))


def _expected(sig: signal.Signals) -> tuple[int, str, int]:
    """The process's return code, the run's status and stored exit code for ``sig``."""
    if sig == signal.SIGINT:
        return 130, "interrupted", 130
    return -sig, "terminated", 128 + sig


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("where", ["del", "weakref", "except"])
def test_a_signal_in_a_callback_or_swallowed_still_ends_the_run(
    tmp_path: Path, history_url: str, where: str, sig: signal.Signals
) -> None:
    write(tmp_path / "kernels.py", KERNEL)
    script = write(tmp_path / "prog.py", SWALLOWING)
    proc = _popen([*tilelens_argv(), "--db", history_url, "record", str(script), where])
    _wait_for(proc, "inside")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    returncode, status, exit_code = _expected(sig)
    assert proc.returncode == returncode, err
    assert "Exception ignored" not in err
    assert run_row(history_url) == (status, exit_code, 1)  # no launch after the signal
    assert "run 1: 1 launch of 1 kernel" in err


# -- exit statuses ------------------------------------------------------------------------------------------

EXITING = """
import atexit, os, sys, time
import torch
from kernels import inc

inc(torch.zeros(100))
how = sys.argv[1]
if how == "atexit-os-exit":
    atexit.register(os._exit, 5)
elif how == "atexit-sleep":
    def slow():
        print("inside", flush=True)
        time.sleep(600)
    atexit.register(slow)
elif how == "atexit-raises":
    def broken():
        raise RuntimeError("broken callback")
    atexit.register(broken)
    sys.exit(4)
else:
    sys.exit(int(how))
"""


@pytest.mark.parametrize(
    ("how", "returncode", "stored"),
    [
        ("261", 5, ("failed", 5)),
        ("-1", 255, ("failed", 255)),
        ("256", 0, ("ok", 0)),
        ("atexit-os-exit", 5, ("failed", 5)),
        ("atexit-raises", 4, ("failed", 4)),
    ],
)
def test_the_history_stores_the_status_the_process_exits_with(
    tmp_path: Path, history_url: str, how: str, returncode: int, stored: tuple[str, int]
) -> None:
    write(tmp_path / "kernels.py", KERNEL)
    script = write(tmp_path / "prog.py", EXITING)
    proc = subprocess.run(
        [*tilelens_argv(), "--db", history_url, "record", str(script), how],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == returncode, proc.stderr
    assert run_row(history_url) == (*stored, 1)
    if how == "atexit-raises":
        assert "Exception ignored in atexit callback" in proc.stderr and "broken callback" in proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_during_an_atexit_callback_ends_the_run_as_the_signal(
    tmp_path: Path, history_url: str, sig: signal.Signals
) -> None:
    write(tmp_path / "kernels.py", KERNEL)
    script = write(tmp_path / "prog.py", EXITING)
    proc = _popen([*tilelens_argv(), "--db", history_url, "record", str(script), "atexit-sleep"])
    _wait_for(proc, "inside")
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=300)
    returncode, status, exit_code = _expected(sig)
    assert proc.returncode == returncode, err
    assert run_row(history_url) == (status, exit_code, 1)


# -- signals in TileLens's own windows ----------------------------------------------------------------------

# ``tilelens`` with one moment patched to send a signal to its own process right there.
WRAPPER = """
import builtins, importlib.abc, os, signal, sys

moment, signame = sys.argv[1], sys.argv[2]
sig = getattr(signal, signame)
fired = []

def fire():
    if not fired:
        fired.append(1)
        os.kill(os.getpid(), sig)

if moment == "triton-import":
    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "triton":
                fire()
            return None
    sys.meta_path.insert(0, Finder())
elif moment == "run-finished":
    from tilelens.core.recording.recording import Recording
    original = Recording.finish
    def finish(self, *args, **kwargs):
        original(self, *args, **kwargs)
        fire()
    Recording.finish = finish
elif moment == "pre-ping":
    from sqlalchemy.dialects.postgresql import _psycopg_common
    Dialect = _psycopg_common._PGDialect_common_psycopg
    original_ping = Dialect.do_ping
    def do_ping(self, conn):
        if getattr(builtins, "FIRE", False):
            fire()  # the signal lands inside the ping, as SIGTERM did in the issue
        return original_ping(self, conn)
    Dialect.do_ping = do_ping

from tilelens.cli import main
sys.exit(main(sys.argv[3:]))
"""

PLAIN = """
import builtins, torch
from kernels import inc

inc(torch.zeros(100))
builtins.FIRE = True  # the next pool checkout's pre-ping sends the signal
inc(torch.zeros(100))
inc(torch.zeros(100))
print("done", flush=True)
"""


@pytest.mark.parametrize(
    ("moment", "sig"),
    [
        ("triton-import", signal.SIGINT),
        ("triton-import", signal.SIGTERM),
        ("run-finished", signal.SIGINT),
        ("run-finished", signal.SIGTERM),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_a_signal_in_tilelens_own_windows_is_one_clean_end(
    tmp_path: Path, history_url: str, moment: str, sig: signal.Signals
) -> None:
    write(tmp_path / "kernels.py", KERNEL)
    script = write(tmp_path / "prog.py", PLAIN)
    wrapper = write(tmp_path / "wrap.py", WRAPPER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(wrapper), moment, sig.name, "--db", history_url, "record", str(script)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
        preexec_fn=default_signals,
    )
    returncode, status, exit_code = _expected(sig)
    assert proc.returncode == returncode, proc.stderr
    assert "Traceback" not in proc.stderr and "ImportError" not in proc.stderr, proc.stderr
    assert "run None" not in proc.stderr and "--run None" not in proc.stderr
    assert run_row(history_url)[:2] == (status, exit_code)
    if moment == "triton-import":
        assert "done" not in proc.stdout  # the program never started
        assert run_row(history_url)[2] == 0


def test_sigterm_during_the_pool_pre_ping_is_terminated_not_failed(tmp_path: Path, history_url: str) -> None:
    """On PostgreSQL a SIGTERM in SQLAlchemy's pre-ping left psycopg unable to change autocommit: three
    tracebacks and a run stored ``failed (exit 1)``. TileLens's own writes now take the signal after them."""
    if "://" not in history_url:
        pytest.skip("the pool pre-ping is PostgreSQL's (SQLite connections are not pinged)")
    write(tmp_path / "kernels.py", KERNEL)
    script = write(tmp_path / "prog.py", PLAIN)
    wrapper = write(tmp_path / "wrap.py", WRAPPER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, str(wrapper), "pre-ping", "SIGTERM", "--db", history_url, "record", str(script)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
        preexec_fn=default_signals,
    )
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert "Traceback" not in proc.stderr and "autocommit" not in proc.stderr, proc.stderr
    status, exit_code, launches = run_row(history_url)
    assert (status, exit_code) == ("terminated", 143)
    assert launches == 2  # the launch being written when the signal came is kept whole
    assert "done" not in proc.stdout


def test_the_signal_contract_needs_no_private_structs() -> None:
    """The mechanism is python's public one: signal handlers, sys.unraisablehook, _thread.interrupt_main."""
    text = (ROOT / "tilelens" / "runner.py").read_text()
    assert "ctypes" not in text and "pythonapi" not in text
    assert textwrap.dedent("sys.unraisablehook") in text
