"""``tilelens --version``, ``db upgrade``, ``db current`` and the one-line error policy."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests import store_helpers
from tilelens.cli import main
from tilelens.store import History
from tilelens.store.sql.database import script_heads
from tilelens.store.sql.models import TABLES

HEAD = ", ".join(script_heads())


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0
    assert out.startswith("tilelens ") and out.split()[1][0].isdigit()


def test_upgrade_creates_then_reports_up_to_date(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv("TILELENS_BLOBS")
    db = tmp_path / "h" / "t.db"
    code, out, _ = run_cli(capsys, "--db", str(db), "db", "upgrade")
    assert code == 0 and f"to revision {HEAD}" in out and db.exists()
    code, out, _ = run_cli(capsys, "--db", str(db), "db", "upgrade", "--json")
    assert code == 0
    assert json.loads(out) == {
        "db": f"sqlite:///{db}",
        "blobs": str(tmp_path / "h" / "blobs"),
        "from": HEAD,
        "to": HEAD,
    }


def test_current_reports_revision_location_and_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "t.db"
    with History.open(str(db), tmp_path / "b") as h:
        run = h.begin_run(store_helpers.run_info())
        h.write_launch(run, store_helpers.launch())
    code, out, _ = run_cli(capsys, "--db", str(db), "--blobs", str(tmp_path / "b"), "db", "current", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["revision"] == HEAD and data["up_to_date"] and data["exists"]
    assert data["blobs"] == str(tmp_path / "b")
    assert set(data["counts"]) == set(TABLES)
    assert (data["counts"]["runs"], data["counts"]["launches"], data["counts"]["launch_args"]) == (1, 1, 4)

    code, out, _ = run_cli(capsys, "--db", str(db), "db", "current")
    assert code == 0
    assert f"revision  {HEAD} (up to date)" in out and str(db) in out
    assert any(line.split() == ["launch_args", "4"] for line in out.splitlines())


def test_current_uses_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("TILELENS_DB", str(tmp_path / "env.db"))
    History.open().close()
    code, out, _ = run_cli(capsys, "db", "current", "--json")
    assert code == 0 and json.loads(out)["db"] == f"sqlite:///{tmp_path}/env.db"


def test_current_does_not_create_a_missing_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "nothing" / "t.db"
    code, out, _ = run_cli(capsys, "--db", str(db), "db", "current", "--json")
    assert code == 0
    assert json.loads(out)["exists"] is False and json.loads(out)["revision"] is None
    assert not (tmp_path / "nothing").exists()


def _assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("tilelens: error: ") and "Traceback" not in err
    for needle in needles:
        assert needle in err


@pytest.mark.parametrize("command", [["db", "upgrade"], ["db", "current"]])
def test_text_file_as_db_is_one_line_exit_2(tmp_path: Path, capsys, command: list[str]) -> None:  # noqa: ANN001
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n")
    code, out, err = run_cli(capsys, "--db", str(path), *command)
    _assert_one_line_error(code, out, err, str(path), "not a database")
    assert path.read_text() == "not a database\n"


def test_directory_as_db_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _assert_one_line_error(*run_cli(capsys, "--db", str(tmp_path), "db", "upgrade"), str(tmp_path))


@pytest.mark.parametrize("command", [["db", "upgrade"], ["db", "current"]])
def test_newer_schema_is_one_line_exit_2(tmp_path: Path, capsys, command: list[str]) -> None:  # noqa: ANN001
    db = tmp_path / "t.db"
    History.open(str(db)).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'ffff'")
    conn.close()
    _assert_one_line_error(*run_cli(capsys, "--db", str(db), *command), "ffff", "newer")


def test_bad_url_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    _assert_one_line_error(
        *run_cli(capsys, "--db", "postgresql://h:port/x", "db", "current"), "not a database URL"
    )


def test_debug_adds_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("x")
    code, _, err = run_cli(capsys, "--debug", "--db", str(path), "db", "current")
    assert code == 2 and "Traceback" in err and err.strip().splitlines()[-1].startswith("tilelens: error:")


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "db", "no-such-command")
    assert code == 2 and "no-such-command" in err


def test_console_script_process(tmp_path: Path) -> None:
    """The real process: exit status and stderr as a shell sees them."""
    path = tmp_path / "notes.txt"
    path.write_text("x")
    cmd = [sys.executable, "-c", "import sys; from tilelens.cli import main; sys.exit(main())"]
    bad = subprocess.run(
        [*cmd, "--db", str(path), "db", "current"], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("tilelens: error:")
    ok = subprocess.run(
        [*cmd, "--db", str(tmp_path / "h.db"), "db", "upgrade"], capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr
