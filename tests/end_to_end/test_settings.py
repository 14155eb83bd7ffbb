"""Project settings in use: a history found from a subfolder, [tool.tilelens] defaults for record, bad TOML."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch

import tilelens
from tests import kernels
from tests.end_to_end.conftest import one_line_error, tilelens_in_process

SCRIPT = """
import torch
from tests import kernels

x, y, out = torch.ones(100), torch.ones(100), torch.empty(100)
kernels.add_kernel[(1,)](x, y, out, 100, BLOCK=128)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose pyproject.toml sets db, tag and autotune; the test runs in a subfolder of it."""
    for name in ("TILELENS_DB", "TILELENS_BLOBS", "TILELENS_TAG", "TILELENS_AUTOTUNE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "pyproject.toml").write_text(
        '[project]\nname = "demo"\n\n[tool.tilelens]\ndb = "hist/h.db"\ntag = "proj"\nautotune = "all"\n'
    )
    monkeypatch.chdir(proj / "src")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))  # `from tests import kernels`
    return proj


def runs(db: Path) -> list[tuple[int, str | None]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT id, tag FROM runs ORDER BY id").fetchall()


def test_record_api_takes_its_defaults_from_pyproject(project: Path) -> None:
    x, y, out = torch.ones(10), torch.ones(10), torch.empty(10)
    with tilelens.record() as rec:
        kernels.add_kernel[(1,)](x, y, out, 10, BLOCK=16)
    assert rec.autotune_policy == "all"
    with tilelens.record(tag="given", autotune="first") as rec2:
        kernels.add_kernel[(1,)](x, y, out, 10, BLOCK=16)
    assert rec2.autotune_policy == "first"
    assert runs(project / "hist" / "h.db") == [(1, "proj"), (2, "given")]
    assert not (project / "src" / ".tilelens").exists()


def test_cli_record_then_ls_from_another_subfolder(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "src" / "job.py").write_text(SCRIPT)
    done = tilelens_in_process("record", "job.py")
    assert done.returncode == 0, done.stderr
    assert f"history: {project / 'hist' / 'h.db'}" in done.stderr
    other = project / "docs" / "deep"
    other.mkdir(parents=True)
    monkeypatch.chdir(other)
    listed = tilelens_in_process("ls", "--runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(r["id"], r["tag"]) for r in json.loads(listed.stdout)] == [(1, "proj")]


def test_discovered_history_without_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILELENS_DB")
    monkeypatch.delenv("TILELENS_BLOBS")
    monkeypatch.setenv("HOME", str(tmp_path))
    proj = tmp_path / "proj"
    monkeypatch.chdir(tmp_path)
    up = tilelens_in_process("--db", proj / ".tilelens" / "tilelens.db", "db", "upgrade")
    assert up.returncode == 0, up.stderr
    (proj / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(proj / "a" / "b")
    current = tilelens_in_process("db", "current", "--json")
    assert current.returncode == 0, current.stderr
    assert json.loads(current.stdout)["db"] == f"sqlite:///{proj}/.tilelens/tilelens.db"
    assert tilelens_in_process("ls").returncode == 0


def test_bad_pyproject_is_one_line_and_exit_2(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.tilelens]\nautotune = "every"\n')
    line = one_line_error(tilelens_in_process("ls"))
    assert line == (
        f"tilelens: error: {project / 'pyproject.toml'}: [tool.tilelens] autotune must be first or all,"
        " not 'every'"
    )
