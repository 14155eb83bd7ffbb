"""Bad input ends in one line and exit 2, never a traceback, and loses nothing (issue 12, items 9 and 13)."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.end_to_end.conftest import EXAMPLES, Recorded, one_line_error, tilelens, tilelens_in_process
from tilelens.store.sql.readonly import known_revisions


@pytest.fixture
def examples_history(examples_recording: Recorded) -> Recorded:
    """SQLite only: these tests check damaged SQLite files, their pragmas and bytes."""
    return examples_recording


BEYOND = "99999999999999999999"  # past SQLite's 64-bit integers


@pytest.mark.parametrize(
    "command",
    [
        ["show", BEYOND],
        ["export", BEYOND, "-o", "x.parquet"],
        ["replay", BEYOND],
        ["replay", BEYOND, "--no-store"],
    ],
)
def test_ids_beyond_sqlite_integers_are_not_found(examples_history: Recorded, command: list[str]) -> None:
    line = one_line_error(examples_history.main(*command))
    assert line == f"tilelens: error: no launch {BEYOND} in history {examples_history.db}"


def test_listings_beyond_sqlite_integers(examples_history: Recorded) -> None:
    assert (
        examples_history.main("ls", "--run", BEYOND).stdout
        == examples_history.main("ls", "--run", "999").stdout
    )
    assert "no launches match" in examples_history.main("ls", "--run", BEYOND).stdout
    assert "no runs match" in examples_history.main("ls", "--runs", "--run", BEYOND).stdout
    everything = examples_history.main("ls", "--limit", BEYOND)
    assert (
        everything.returncode == 0
        and everything.stdout == examples_history.main("ls", "--limit", "1000").stdout
    )
    line = one_line_error(examples_history.main("replay", "--run", BEYOND))
    assert line == f"tilelens: error: no launches of run {BEYOND} to replay"


def test_two_rows_in_alembic_version(examples_history: Recorded, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with sqlite3.connect(examples_history.db) as src, sqlite3.connect(db) as dst:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode = DELETE")
        dst.execute("INSERT INTO alembic_version VALUES ('0001')")
    src.close()
    dst.close()
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    (head,) = known_revisions()[1]  # what the recording stamped
    for command in (["db", "upgrade"], ["db", "current"], ["replay", "1"]):
        line = one_line_error(tilelens_in_process("--db", db, *command))
        assert line.startswith(f"tilelens: error: history {db} has an inconsistent schema stamp: ")
        assert f"holds {head}, 0001 (0001 is older than {head}, not a second branch)" in line
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


def test_record_of_a_folder_without_main(tmp_path: Path) -> None:
    program = tmp_path / "program"
    program.mkdir()
    (program / "helper.py").write_text("print('ran')\n")
    db = tmp_path / "h" / "h.db"
    proc = tilelens("--db", db, "record", f"{program}/")
    assert one_line_error(proc) == f"tilelens: error: can't find '__main__' module in '{program}'"
    assert proc.stdout == "" and not db.exists()  # nothing ran, nothing recorded


@pytest.mark.parametrize("kind", ["file", "inside a file"])
def test_record_into_a_blob_folder_that_is_a_file(tmp_path: Path, kind: str) -> None:
    blocker = tmp_path / "blobs"
    blocker.write_text("not a folder")
    blobs = blocker if kind == "file" else blocker / "sub"
    db = tmp_path / "h.db"
    proc = tilelens("--db", db, "--blobs", blobs, "record", EXAMPLES / "vector_add.py")
    line = one_line_error(proc)
    assert line == f"tilelens: error: cannot use blob folder {blobs}: {blocker} is not a folder"
    assert proc.stdout == ""  # the program did not start
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    conn.close()


def test_record_into_a_read_only_blob_folder(tmp_path: Path) -> None:
    from tests.end_to_end.test_cli_read_only import run_on_read_only

    blobs = tmp_path / "ro" / "blobs"
    blobs.mkdir(parents=True)
    db = tmp_path / "h.db"
    (proc,) = run_on_read_only(
        blobs.parent, ["--db", db, "--blobs", blobs, "record", EXAMPLES / "vector_add.py"]
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr == f"tilelens: error: cannot use blob folder {blobs}: it is not writable\n"


def test_export_of_a_corrupt_trace_names_the_launch_and_the_blob(
    examples_history: Recorded, tmp_path: Path
) -> None:
    shutil.copy(examples_history.db, tmp_path / "h.db")
    shutil.copytree(examples_history.db.parent / "blobs", tmp_path / "blobs")
    (launch,) = examples_history.ids["shift_kernel"]
    ((sha,),) = examples_history.rows(f"SELECT trace_blob FROM launches WHERE id = {launch}")
    blob = tmp_path / "blobs" / sha[:2] / sha
    blob.chmod(0o644)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    out = tmp_path / "lanes.parquet"
    line = one_line_error(
        tilelens_in_process(
            "--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs", "export", launch, "-o", out
        )
    )
    assert line.startswith(f"tilelens: error: launch {launch}'s access trace: blob {sha} is corrupt: ")
    assert not out.exists() and not list(tmp_path.glob(".lanes.parquet.*"))


def test_sql_allows_the_read_only_checks(examples_history: Recorded) -> None:
    for pragma in ("integrity_check", "quick_check", "integrity_check(launches)", "quick_check(3)"):
        out = examples_history.main("sql", f"PRAGMA {pragma}", "--format", "csv")
        assert out.returncode == 0 and out.stdout.splitlines()[1:] == ["ok"], (pragma, out)
    for pragma in ("foreign_key_check", "foreign_key_check(launches)"):
        out = examples_history.main("sql", f"PRAGMA {pragma}", "--format", "csv")
        assert out.returncode == 0 and out.stdout == "table,rowid,parent,fkid\n", (pragma, out)


def test_views_hint_only_when_upgrading_adds_them(examples_history: Recorded, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    shutil.copy(examples_history.db, db)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP VIEW oob_launches")  # at the newest revision: `db upgrade` would not bring it back
    conn.close()
    line = one_line_error(tilelens_in_process("--db", db, "sql", "SELECT * FROM oob_launches"))
    assert line == "tilelens: error: SQL error: no such table: oob_launches"
    assert "already at revision" in tilelens_in_process("--db", db, "db", "upgrade").stdout
    # A name that merely contains a view's name is a typo, not a missing view.
    line = one_line_error(examples_history.main("sql", "SELECT * FROM launch_overviews"))
    assert line == "tilelens: error: SQL error: no such table: launch_overviews"


@pytest.mark.parametrize(
    "argv",
    [["show"], ["ls", "--bogus"], ["show", "abc"], ["bogus"], ["sql", "SELECT 1", "--timeout", "0"]],
)
def test_usage_errors_are_one_line(argv: list[str]) -> None:
    one_line_error(tilelens_in_process(*argv))
