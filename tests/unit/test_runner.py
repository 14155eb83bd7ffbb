"""tilelens.runner in-process: what the program sees and how its end is reported, as with python itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tilelens import runner


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


PROBE = """
import json, sys
import helper
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "name": __name__, "file": __file__,
                  "main_is_me": sys.modules["__main__"].__dict__ is globals(), "helper": helper.VALUE}))
code = sys.argv[1] if len(sys.argv) > 1 else "0"
if code == "raise":
    def inner():
        raise KeyError("k")
    inner()
if code == "text":
    sys.exit("stopped: bad input")
if code == "ctrl-c":
    raise KeyboardInterrupt
sys.exit(int(code))
"""


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    write(tmp_path / "proj" / "helper.py", "VALUE = 42\n")
    return write(tmp_path / "proj" / "probe.py", PROBE)


def python_itself(script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize(("arg", "status"), [("0", 0), ("3", 3), ("text", 1), ("raise", 1), ("ctrl-c", 130)])
def test_same_output_and_status_as_python(
    probe: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    arg: str,
    status: int,
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = "proj/probe.py"
    saved_path, saved_argv, saved_main = list(sys.path), list(sys.argv), sys.modules["__main__"]
    outcome = runner.run(runner.Target(relative), [arg])
    out, err = capsys.readouterr()
    assert (sys.path, sys.argv, sys.modules["__main__"]) == (saved_path, saved_argv, saved_main)
    assert outcome == runner.Outcome(status, interrupted=arg == "ctrl-c")
    real = python_itself(Path(relative), arg, cwd=tmp_path)
    assert out == real.stdout
    if arg != "ctrl-c":  # python itself exits through SIGINT there
        assert real.returncode == status
    assert err == real.stderr
    assert '"main_is_me": true' in out and '"helper": 42' in out


def test_module_target_runs_package_main_from_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "pkg" / "__init__.py", "")
    write(tmp_path / "pkg" / "__main__.py", "import sys\nprint(sys.argv[1:], sys.path[0], __name__)\n")
    monkeypatch.chdir(tmp_path)
    runner.check(runner.Target("pkg", is_module=True))
    assert runner.run(runner.Target("pkg", is_module=True), ["a", "-b"]) == runner.Outcome(0)
    assert capsys.readouterr().out == f"['a', '-b'] {tmp_path} __main__\n"
    assert "pkg" not in sys.modules or sys.modules["pkg"].__file__.startswith(str(tmp_path))


def test_missing_programs_are_refused_before_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(runner.ProgramNotFoundError, match="can't open file .*nope.py.*No such file"):
        runner.check(runner.Target("nope.py"))
    with pytest.raises(runner.ProgramNotFoundError, match="No module named nope_mod"):
        runner.check(runner.Target("nope_mod", is_module=True))
    with pytest.raises(runner.ProgramNotFoundError, match="nope_pkg"):
        runner.check(runner.Target("nope_pkg.sub", is_module=True))


def test_symlinked_script_puts_its_real_folder_first(tmp_path: Path) -> None:
    real = write(tmp_path / "real" / "s.py", "")
    link = tmp_path / "links" / "s.py"
    link.parent.mkdir()
    link.symlink_to(real)
    assert runner.path_entry(runner.Target(str(link))) == str(real.parent)


@pytest.fixture
def default_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP at their default disposition, whatever the test runner had set, and back after."""
    saved = {s: signal.signal(s, signal.SIG_DFL) for s in runner.FINISHING_SIGNALS}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


@pytest.mark.usefixtures("default_signals")
def test_sigterm_and_sighup_end_the_program_with_an_outcome(tmp_path: Path) -> None:
    """Inside run() the signals raise Terminated (finally blocks run); the default handlers come back after."""
    script = write(
        tmp_path / "sig.py",
        """
        import os, signal, sys
        try:
            os.kill(os.getpid(), getattr(signal, sys.argv[1]))
            print("not reached")
        finally:
            print("finally")
        """,
    )
    for name, signum in (("SIGTERM", signal.SIGTERM), ("SIGHUP", signal.SIGHUP)):
        outcome = runner.run(runner.Target(str(script)), [name])
        assert outcome == runner.Outcome(128 + signum, signal=signum)
        assert [signal.getsignal(s) for s in runner.FINISHING_SIGNALS] == [signal.SIG_DFL] * 2


@pytest.mark.usefixtures("default_signals")
def test_a_signal_ignored_before_stays_ignored() -> None:
    """Under nohup SIGHUP is ignored: the program must go on as it would without TileLens."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with runner.finishing_signals():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing happens
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
