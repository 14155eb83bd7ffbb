"""The compiled module's profile-guided build (``tilelens.core.native``, ``native_training``): trained on the
steady launches a GPU recording makes, and built without a profile, the same code, whenever that way fails."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tilelens.core import native


def _train(module: Path, steps: int) -> subprocess.CompletedProcess[str]:
    """``python -m tilelens.core.native_training MODULE STEPS`` as the profile-guided build runs it (its
    environment: ``native._child_env``)."""
    argv = [sys.executable, "-m", "tilelens.core.native_training", str(module), str(steps)]
    return subprocess.run(argv, capture_output=True, text=True, env=native._child_env(), timeout=600)


def test_the_training_run_records_every_launch_through_the_launchers_gpu_path(native_module: Any) -> None:
    # The module the suite built (``native_module``), trained on as the profile-guided build trains the
    # instrumented one: every launch but each kernel's first is steady, through Triton's (stand-in) run.
    path = native.target()
    done = _train(path, 4)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "steady launches: 18; fallbacks: 2; Triton's run: True",
        f"20 launches recorded through {path}",
    ]


def test_the_training_run_fails_for_a_module_that_does_not_load(tmp_path: Path) -> None:
    bogus = tmp_path / "_tilelens_capture.so"
    bogus.write_bytes(b"not a shared object")
    done = _train(bogus, 2)
    assert done.returncode == 1 and done.stdout.strip() == f"0 launches recorded through {bogus}"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_a_build_whose_profile_step_fails_is_built_without_a_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A compiler that is gcc in every way but refuses to instrument: the build falls back to the plain one.
    wrapper = tmp_path / "g++"
    wrapper.write_text(
        "#!/bin/sh\ncase \"$*\" in *-fprofile-generate*) echo 'no profiling here' >&2; exit 1;; esac\n"
        f'exec {shutil.which("g++")} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    monkeypatch.setenv(native.DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(native.PGO_ENV, raising=False)
    monkeypatch.setattr(native, "_loaded", None)
    native._name.cache_clear()
    try:
        assert native.profile_guided() and native._is_gcc()
        path, text = native.build()
        assert path == native.target() and path.exists()
        assert text == "built now (without a profile: no profiling here)"
        assert not list((tmp_path / "cache").glob("*.failed"))
    finally:
        native._name.cache_clear()


def test_the_training_run_is_not_followed_into_a_recording_this_program_is_part_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A build started inside a followed child (TILELENS_FOLLOW set): the training process must not be
    # recorded into the user's history, and must build nothing of its own nor touch the user's module folder.
    monkeypatch.setenv("TILELENS_FOLLOW", "1")
    monkeypatch.setenv("TILELENS_FOLLOW_DB", "sqlite:///somewhere.db")
    calls: list[tuple[list[str], dict[str, str] | None]] = []

    def fake_run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append((argv, kwargs.get("env")))
        failed = argv[0] == sys.executable  # the compile "succeeds"; the training run fails: no module built
        return subprocess.CompletedProcess(argv, 1 if failed else 0, "", "training refused" if failed else "")

    monkeypatch.setattr(native.subprocess, "run", fake_run)
    assert native._build_profile_guided(tmp_path / "out.so") == (False, "training refused")
    (compile_argv, compile_env), (train_argv, train_env) = calls
    assert any(a.startswith("-fprofile-generate=") for a in compile_argv) and compile_env is None
    assert train_argv[1:3] == ["-m", "tilelens.core.native_training"] and train_env is not None
    assert not [k for k in train_env if k.startswith("TILELENS_FOLLOW")]
    assert train_env[native.ENV] == "1" and train_env[native.PGO_ENV] == "0"
    assert train_env[native.DIR_ENV] != str(native.cache_dir()) and not (tmp_path / "out.so").exists()
