"""``tilelens doctor``: the one place a user reads which capture a compiled recording would use, and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.end_to_end.conftest import tilelens_in_process


def test_doctor_reports_versions_history_extras_and_the_native_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILELENS_NATIVE", "0")
    db = tmp_path / "h.db"
    out = tilelens_in_process("--db", db, "--blobs", tmp_path / "blobs", "doctor", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert set(report["versions"]) == {"tilelens", "triton", "torch", "numpy", "python"}
    assert report["history"] == {"db": f"sqlite:///{db}", "blobs": str(tmp_path / "blobs"), "exists": False}
    assert set(report["extras"]) == {"heatmap", "serve", "duckdb", "postgres"}
    assert report["native"] == "TILELENS_NATIVE=0: the Python capture"
    assert not db.exists()  # doctor creates nothing


def test_doctor_says_the_native_accessor_is_used_once_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native_module: object
) -> None:
    monkeypatch.setenv("TILELENS_NATIVE", "auto")
    out = tilelens_in_process("--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs", "doctor")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("tilelens ") and "triton " in lines[0]
    assert lines[1].endswith(f"(not created yet); blobs in {tmp_path / 'blobs'}")
    assert lines[3].startswith("compiled recordings: native accessor: ") and lines[3].endswith(".so")
