"""An in-memory SQLite history would vanish when the command ends: every command refuses it, one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.end_to_end.conftest import one_line_error, tilelens, tilelens_in_process

URLS = ["sqlite://", "sqlite:///:memory:", "sqlite+pysqlite:///file:mem?mode=memory&uri=true"]
COMMANDS = [
    ["ls"],
    ["ls", "--runs"],
    ["show", "1"],
    ["sql", "SELECT 1"],
    ["export", "1"],
    ["replay", "1"],
    ["gc"],
    ["db", "current"],
    ["db", "upgrade"],
]


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_refuses_an_in_memory_history(
    url: str, command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_line_error(tilelens_in_process("--db", url, *command))
    assert line == (
        f"tilelens: error: {url} is an in-memory SQLite database: a history there vanishes when tilelens "
        "exits; give a file path or a sqlite:////absolute/path.db URL"
    )
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere (no export file, no .tilelens)


@pytest.mark.parametrize("how", ["--db", "TILELENS_DB"])
def test_record_refuses_it_before_the_program_runs(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "prog.py"
    script.write_text("open('ran', 'w').close()\n")
    if how == "--db":
        proc = tilelens("--db", "sqlite://", "record", script, cwd=tmp_path)
    else:
        monkeypatch.setenv("TILELENS_DB", "sqlite:///:memory:")
        proc = tilelens("record", script, cwd=tmp_path)
    assert "is an in-memory SQLite database" in one_line_error(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.py"]  # the program never ran
