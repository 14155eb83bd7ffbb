"""Reading never writes: no command that only reads creates, converts or changes a file (issue 12, items 3, 11).

``ls``, ``show``, ``sql``, ``export``, ``report``, ``db current`` and ``replay --no-store`` open SQLite read-only, so a
0-byte file, another program's database, a history without WAL and a missing path stay byte for byte as they
were; ``replay`` stores its row only into an existing history at the current schema. On read-only media
(a read-only bind mount when the tests run as root, where permissions do not stop writes; chmod otherwise)
the reading commands still work.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.end_to_end.conftest import Recorded, one_line_error, tilelens_argv, tilelens_in_process


@pytest.fixture
def examples_history(examples_recording: Recorded) -> Recorded:
    """SQLite only: these tests check SQLite files on read-only media, WAL files, bytes on disk."""
    return examples_recording


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (names and content hashes): what "nothing changed" means."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def copy_history(examples: Recorded, folder: Path, *, wal: bool = True) -> Path:
    """A consistent copy of the examples history (database and blobs) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "h.db"
    with sqlite3.connect(examples.db) as src, sqlite3.connect(db) as dst:
        src.backup(dst)
        if not wal:
            dst.execute("PRAGMA journal_mode = DELETE")
    dst.close()
    src.close()
    shutil.copytree(examples.db.parent / "blobs", folder / "blobs")
    for leftover in folder.glob("h.db-*"):
        leftover.unlink()
    return db


def read_commands(launch: int, out: Path) -> list[list[object]]:
    return [
        ["ls"],
        ["ls", "--runs"],
        ["show", launch],
        ["sql", "SELECT count(*) AS n FROM launches"],
        ["export", launch, "-o", out],
        ["db", "current"],
        ["replay", launch, "--no-store"],
        ["report", "--html", out.parent / "report", "--force"],
    ]


def test_reading_changes_no_file_whatever_is_there(examples_history: Recorded, tmp_path: Path) -> None:
    launch = examples_history.ids["add_kernel"][0]
    out = tmp_path / "out" / "lanes.parquet"
    out.parent.mkdir()
    zero = tmp_path / "zero"
    zero.mkdir()
    (zero / "h.db").write_bytes(b"")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    with sqlite3.connect(foreign / "h.db") as conn:  # another program's database, in rollback-journal mode
        conn.execute("CREATE TABLE notes (x)")
        conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.close()
    missing = tmp_path / "missing"
    missing.mkdir()
    for folder in (zero, foreign, missing):
        before = snapshot(folder)
        for command in [*read_commands(launch, out), ["replay", launch]]:
            result = tilelens_in_process("--db", folder / "h.db", "--blobs", folder / "blobs", *command)
            if command[:2] == ["db", "current"] and folder is not foreign:
                assert result.returncode == 0 and "no history here yet" in result.stdout, result
            else:
                line = one_line_error(result)
                assert "no TileLens history" in line or "another program" in line, line
            assert snapshot(folder) == before, command
    assert not (missing / "h.db").exists() and not out.exists()


def test_a_history_without_wal_stays_byte_identical(examples_history: Recorded, tmp_path: Path) -> None:
    folder = tmp_path / "h"
    db = copy_history(examples_history, folder, wal=False)
    launch = examples_history.ids["add_kernel"][0]
    out = tmp_path / "lanes.parquet"
    before = snapshot(folder)
    assert db.read_bytes()[18:20] == b"\x01\x01"  # rollback journal: a WAL switch would change these bytes
    for command in read_commands(launch, out):
        result = tilelens_in_process("--db", db, "--blobs", folder / "blobs", *command)
        assert result.returncode == 0, (command, result)
        assert snapshot(folder) == before, command
    assert out.exists()


def test_replay_stores_only_into_an_existing_current_history(
    examples_history: Recorded, tmp_path: Path
) -> None:
    folder = tmp_path / "h"
    db = copy_history(examples_history, folder, wal=False)
    launch = examples_history.ids["add_kernel"][0]

    def replays() -> int:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT count(*) FROM replays").fetchone()[0]
        finally:
            conn.close()

    count = replays()
    assert tilelens_in_process("--db", db, "--blobs", folder / "blobs", "replay", launch).returncode == 0
    assert replays() == count + 1
    # An older schema is not migrated by a replay: one line, the file as it was.
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")  # the stored replay switched it to WAL
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    conn.close()
    before = snapshot(folder)
    assert not any(name.startswith("h.db-") for name in before)
    line = one_line_error(tilelens_in_process("--db", db, "--blobs", folder / "blobs", "replay", launch))
    assert "schema revision 0001, older than" in line and "`tilelens db upgrade` upgrades it" in line
    assert snapshot(folder) == before


# -- read-only media ---------------------------------------------------------------------------------------


def run_on_read_only(folder: Path, *argvs: list[object]) -> list[subprocess.CompletedProcess[str]]:
    """Run each command line (``tilelens`` ones as lists of its arguments) while ``folder`` is really read-only.

    As root (the usual container), permissions do not stop writes, so the folder is bind-mounted read-only
    onto itself inside a private mount namespace (``unshare -m``), which vanishes with the command. Otherwise
    the folder and its files lose their write permission for the duration.
    """
    commands = [
        [str(a) for a in argv] if argv[0] == sys.executable else [*tilelens_argv(), *(str(a) for a in argv)]
        for argv in argvs
    ]
    driver = (
        "import json, subprocess, sys\n"
        "out = [subprocess.run(c, capture_output=True, text=True) for c in json.loads(sys.argv[1])]\n"
        "print(json.dumps([[p.returncode, p.stdout, p.stderr] for p in out]))\n"
    )
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("running as root without unshare: cannot make a folder read-only")
        mount = f'mount --bind -o ro "{folder}" "{folder}" && exec "$0" "$@"'
        argv = ["unshare", "-m", "sh", "-c", mount, sys.executable, "-c", driver, json.dumps(commands)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 and "mount" in proc.stderr:
            pytest.skip(f"cannot bind-mount read-only here: {proc.stderr.strip()}")
    else:
        paths = [folder, *folder.rglob("*")]
        modes = {p: p.stat().st_mode for p in paths}
        for p in paths:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            proc = subprocess.run(
                [sys.executable, "-c", driver, json.dumps(commands)],
                capture_output=True,
                text=True,
                timeout=600,
            )
        finally:
            for p in reversed(paths):
                p.chmod(modes[p])
    assert proc.returncode == 0, proc.stderr
    return [
        subprocess.CompletedProcess(c, rc, out, err)
        for c, (rc, out, err) in zip(commands, json.loads(proc.stdout))
    ]


PLAIN_READ = (
    "import sqlite3, sys\n"
    "try:\n"
    "    sqlite3.connect(f'file:{sys.argv[1]}?mode=ro', uri=True).execute('SELECT 1 FROM sqlite_master')\n"
    "    print('readable')\n"
    "except sqlite3.Error as exc:\n"
    "    print(exc)\n"
)


def test_reading_commands_work_on_read_only_media(examples_history: Recorded, tmp_path: Path) -> None:
    folder = tmp_path / "h"
    db = copy_history(
        examples_history, folder
    )  # WAL mode, no -shm beside it: what a read-only copy looks like
    launch = examples_history.ids["add_kernel"][0]
    out = tmp_path / "lanes.csv"
    before = snapshot(folder)
    where: list[object] = ["--db", db, "--blobs", folder / "blobs"]
    commands = [[*where, *c] for c in read_commands(launch, out)]
    commands[3] = [*where, "sql", "SELECT count(*) AS n FROM launches", "--format", "csv"]
    commands[4] = [*where, "export", launch, "--format", "csv", "-o", out]
    *results, store, plain = run_on_read_only(
        folder, *commands, [*where, "replay", launch], [sys.executable, "-c", PLAIN_READ, db]
    )
    # The medium really is read-only: a plain read-only SQLite open fails there, as the issue reports.
    assert plain.stdout.strip() == "unable to open database file"
    for command, proc in zip(commands, results):
        assert proc.returncode == 0, (command, proc.stderr)
    ls, runs, show, sql, _export, current, replay, report = results
    assert "add_kernel" in ls.stdout and "examples" in runs.stdout
    assert show.stdout.startswith(f"launch {launch} ")
    (total,) = examples_history.rows("SELECT count(*) FROM launches")[0]
    assert sql.stdout == f"n\n{total}\n"
    assert "up to date" in current.stdout
    assert replay.stdout.startswith(f"match: launch {launch} ")
    assert out.read_text().startswith('"launch_id","pid_x",')
    assert report.stdout.startswith(f"wrote {tmp_path / 'report' / 'index.html'}: run ")
    # Storing a replay needs a writable history: one line, before anything ran.
    assert store.returncode == 2 and store.stdout == ""
    assert store.stderr == f"tilelens: error: cannot write history {db}: {db} is not writable\n"
    assert snapshot(folder) == before


UNCHECKPOINTED = (
    "import os, sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "conn.execute('PRAGMA wal_autocheckpoint = 0')\n"
    "conn.execute(\"UPDATE runs SET tag = 'only-in-the-wal'\")\n"
    "os._exit(0)  # no close: the commit stays in the -wal file, never copied into the database\n"
)


def test_commits_only_in_the_wal_are_not_hidden_on_read_only_media(
    examples_history: Recorded, tmp_path: Path
) -> None:
    folder = tmp_path / "h"
    db = copy_history(examples_history, folder)
    subprocess.run([sys.executable, "-c", UNCHECKPOINTED, db], check=True)
    (folder / "h.db-shm").unlink()  # as a copy without the index would be
    assert (folder / "h.db-wal").stat().st_size > 0
    where: list[object] = ["--db", db, "--blobs", folder / "blobs"]
    (ls,) = run_on_read_only(folder, [*where, "ls", "--runs"])
    assert ls.returncode == 2 and ls.stdout == ""
    assert ls.stderr.startswith(f"tilelens: error: cannot read history {db}: it is in a folder this process")
    assert "h.db-wal holds commits" in ls.stderr and len(ls.stderr.splitlines()) == 1
    # Where SQLite may write its index, the same copy reads, commit included.
    assert "only-in-the-wal" in tilelens_in_process(*where, "ls", "--runs").stdout
