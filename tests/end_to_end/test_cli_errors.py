"""Input errors end with one line on stderr and exit status 2; reading never creates a history."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.end_to_end.conftest import Recorded, one_line_error, tilelens, tilelens_in_process

READ_COMMANDS = [["ls"], ["ls", "--runs"], ["show", "1"], ["sql", "SELECT 1"], ["export", "1", "-o", "x.csv"]]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: " ".join(a))
def test_no_history_is_reported_and_not_created(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "sub" / "h.db"
    line = one_line_error(tilelens("--db", db, *args, cwd=tmp_path))
    assert line == f"tilelens: error: no TileLens history at {db}"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_default_location_is_not_created_either(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILELENS_DB")
    monkeypatch.delenv("TILELENS_BLOBS")
    monkeypatch.setenv("HOME", str(tmp_path))  # the search for .tilelens stops below home
    cwd = tmp_path / "project" / "sub"
    cwd.mkdir(parents=True)
    proc = tilelens("ls", cwd=cwd)
    assert one_line_error(proc) == (
        f"tilelens: error: no TileLens history in {cwd} or any parent below {tmp_path}"
        " (use --db or TILELENS_DB)"
    )
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["project", "sub"]


def test_not_a_history(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 100)
    assert "not a database" in one_line_error(tilelens_in_process("--db", text, "ls"))
    assert text.read_text() == "hello\n" * 100


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    proc = tilelens("--debug", "--db", tmp_path / "h.db", "ls")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "NoHistoryError" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("tilelens: error: no TileLens history")


@pytest.mark.parametrize("command", ["record", "ls", "show", "sql", "export"])
def test_every_command_has_help_with_an_example(command: str) -> None:
    out = tilelens_in_process(command, "--help")
    assert out.returncode == 0
    assert "Examples" in out.stdout and f"tilelens {command}" in out.stdout.replace(
        "tilelens --db", "tilelens"
    )


def test_json_output_does_not_depend_on_the_terminal(examples_history: Recorded) -> None:
    proc = examples_history.cli("ls", "--json", "--limit", "1")
    assert proc.returncode == 0 and proc.stdout.startswith("[") and proc.stderr == ""
