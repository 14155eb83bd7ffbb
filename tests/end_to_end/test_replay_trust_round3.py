"""The replay trust rule's gaps of issue 47, point 3: a module found in the working directory that
``python -m tilelens`` puts on ``sys.path``, a recorded file reached through ``/proc/self/cwd``, and calls
disguised as attribute reads, subscripts or a local ``constexpr()`` in a kernel-bearing file."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from tests.end_to_end.test_replay_trust import GUARDED, KERNEL, _edit, _payload, _record, _where
from tilelens.replay.scriptload import load_definitions
from tilelens.replay.trust import read_kernel_file

ROOT = Path(__file__).resolve().parents[2]


def _python_m_tilelens(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m tilelens ARGS`` in ``cwd``: python puts that folder first on sys.path."""
    env = dict(os.environ)
    assert str(cwd) not in env.get("PYTHONPATH", "")  # the folder is on sys.path only because of -m
    return subprocess.run(
        [sys.executable, "-m", "tilelens", *(str(a) for a in args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
        check=False,
    )


def _received(tmp_path: Path) -> tuple[dict[str, str], int, Path, Path]:
    """A history recorded from ``made/bump.py`` and a received folder holding an attacker's module."""
    made = tmp_path / "made"
    made.mkdir()
    (made / "bump.py").write_text(GUARDED)
    where = _where(made)
    launch = _record(made / "bump.py", where)
    received = tmp_path / "received"
    received.mkdir()
    marker = tmp_path / "ran.txt"
    return where, launch, received, marker


def test_a_module_in_the_working_directory_is_not_imported(tmp_path: Path) -> None:
    where, launch, received, marker = _received(tmp_path)
    evil = received / "evilmod.py"
    evil.write_text("import triton\nimport triton.language as tl\n" + _payload(marker) + KERNEL)
    # The edited history names the attacker's module, with its file's hash: the kernel inside is the same.
    _edit(where, "UPDATE kernels SET module = 'evilmod'")
    _edit(where, "UPDATE launches SET kernel_file_sha256 = ?", hashlib.sha256(evil.read_bytes()).hexdigest())
    proc = _python_m_tilelens("--db", where["db"], "--blobs", where["blobs"], "replay", launch, cwd=received)
    assert not marker.exists(), proc.stderr  # evilmod's top level never ran
    assert "module evilmod cannot be located" in proc.stderr or proc.returncode != 0, proc.stderr


def test_the_users_own_pythonpath_still_finds_a_module_there(tmp_path: Path) -> None:
    """The working directory on PYTHONPATH is the user's own choice: a module there is located as before."""
    from tilelens.replay.trust import implicit_cwd_entry

    saved = list(sys.path)
    old_env = os.environ.get("PYTHONPATH")
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        sys.path.insert(0, "")
        assert implicit_cwd_entry() == 0  # what python -m put there
        os.environ["PYTHONPATH"] = str(tmp_path)
        assert implicit_cwd_entry() is None  # named by the user too: kept
    finally:
        os.chdir(cwd)
        sys.path[:] = saved
        if old_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_env


def test_a_recorded_file_through_proc_self_cwd_is_refused(tmp_path: Path) -> None:
    where, launch, received, marker = _received(tmp_path)
    helper = received / "helper.py"
    helper.write_text("import triton\nimport triton.language as tl\n" + KERNEL)
    _edit(where, "UPDATE kernels SET file = '/proc/self/cwd/helper.py', module = 'nowhere_to_be_found'")
    _edit(
        where, "UPDATE launches SET kernel_file_sha256 = ?", hashlib.sha256(helper.read_bytes()).hexdigest()
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run(
        [sys.executable, "-m", "tilelens", "--db", where["db"], "--blobs", where["blobs"], "replay", str(launch)],
        capture_output=True, text=True, cwd=received, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "leads through /proc" in proc.stderr
    # A link elsewhere that leads into /proc is refused alike.
    link = tmp_path / "cwdlink"
    link.symlink_to("/proc/self/cwd")
    _edit(where, "UPDATE kernels SET file = ?", str(link / "helper.py"))
    proc = subprocess.run(
        [sys.executable, "-m", "tilelens", "--db", where["db"], "--blobs", where["blobs"], "replay", str(launch)],
        capture_output=True, text=True, cwd=received, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "leads through /proc" in proc.stderr, proc.stderr


DISGUISED = (
    """
import triton
import triton.language as tl

class Meta(type):
    def __getattr__(cls, name):
        open({marker!r}, "a").write("metaclass __getattr__\\n")
        return 1

class K(metaclass=Meta):
    def __class_getitem__(cls, item):
        open({marker!r}, "a").write("__class_getitem__\\n")
        return 1

def constexpr(x):
    open({marker!r}, "a").write("local constexpr\\n")
    return x

A = K.anything
B = K[1]
C = constexpr(3)
ALIAS = K
D = ALIAS.other
BLOCK = tl.constexpr(128)
SIZES = (1, 2, 3)
FIRST = SIZES[0]
"""
    + KERNEL
)


def test_calls_disguised_as_reads_never_run(tmp_path: Path) -> None:
    """Replay loads only the slice of the file the kernel needs (``tilelens.replay.slicing``): assignments
    whose attribute reads, subscripts or local ``constexpr()`` would run the file's own code are not in it."""
    marker = tmp_path / "ran.txt"
    script = tmp_path / "disguised.py"
    script.write_text(DISGUISED.format(marker=str(marker)))
    kfile = read_kernel_file(script, "bump_kernel")
    loaded = load_definitions(kfile, "bump_kernel")
    assert not marker.exists(), marker.read_text()
    assert callable(loaded.module.bump_kernel.fn)
    for name in ("Meta", "K", "constexpr", "A", "B", "C", "ALIAS", "D", "BLOCK", "FIRST"):
        assert not hasattr(loaded.module, name), name
    assert loaded.describe() == "skipped 11 top-level statements of disguised.py (lines 5-26)"
