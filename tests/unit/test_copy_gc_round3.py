"""``db copy`` verifies every blob it writes or finds in DST; ``gc --dry-run`` changes no byte and, like
``db copy`` from a history, works on read-only media; gc and copy refuse bad input with one line (issue 47,
points 7, 9 and 11)."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import sqlite3
import subprocess
from pathlib import Path

import pytest
import torch

from tests import store_helpers
from tests.end_to_end.conftest import one_line_error, tilelens_argv, tilelens_in_process
from tilelens.config import resolve_location
from tilelens.errors import BlobCorruptError
from tilelens.store import History
from tilelens.store.admin.copy import copy_history


def _history(folder: Path, blobs: Path | None = None) -> History:
    return History.open(location=resolve_location(str(folder / "h.db"), blobs or folder / "blobs", env={}))


def _record(h: History, n: int = 2) -> int:
    run = h.begin_run(store_helpers.run_info(tag="t"))
    for i in range(n):
        x = torch.arange(32, dtype=torch.float32) + i
        h.write_launch(
            run, store_helpers.launch(x, torch.zeros(32), x * 2, trace=store_helpers.trace_table(4), seq=i)
        )
    h.finish_run(run, "ok", 0)
    return run


def _blob_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and len(p.name) == 64)


def _flip(path: Path, how: str) -> None:
    os.chmod(path, 0o644)
    data = path.read_bytes()
    if how == "flipped":
        path.write_bytes(data[:10] + bytes([data[10] ^ 0xFF]) + data[11:])
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "wrong-hash":  # another blob's bytes under this one's name
        path.write_bytes(b"another blob entirely")


@pytest.mark.parametrize("how", ["flipped", "truncated", "empty", "wrong-hash"])
def test_a_corrupt_blob_already_in_dst_is_rewritten_from_a_good_source(tmp_path: Path, how: str) -> None:
    with _history(tmp_path / "src") as src:
        _record(src)
    blobs = _blob_files(tmp_path / "src" / "blobs")
    # DST's folder already holds every blob, one of them damaged.
    shutil.copytree(tmp_path / "src" / "blobs", tmp_path / "dst" / "blobs")
    bad = tmp_path / "dst" / "blobs" / blobs[0].parent.name / blobs[0].name
    _flip(bad, how)
    res = tilelens_in_process(
        "db", "copy", tmp_path / "src" / "h.db", tmp_path / "dst" / "h.db",
        "--src-blobs", tmp_path / "src" / "blobs", "--dst-blobs", tmp_path / "dst" / "blobs",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    with _history(tmp_path / "dst") as dst:
        for path in _blob_files(tmp_path / "dst" / "blobs"):
            dst.blobs.verify(path.name)  # every blob of DST is intact now
    assert hashlib.sha256(bad.read_bytes()).hexdigest() == bad.name


@pytest.mark.parametrize("how", ["flipped", "truncated", "empty", "wrong-hash"])
def test_a_bad_source_blob_in_a_shared_folder_stops_the_copy_naming_it(tmp_path: Path, how: str) -> None:
    shared = tmp_path / "blobs"
    with _history(tmp_path / "src", shared) as src:
        _record(src)
    bad = _blob_files(shared)[0]
    _flip(bad, how)
    res = tilelens_in_process(
        "db",
        "copy",
        tmp_path / "src" / "h.db",
        tmp_path / "dst.db",
        "--src-blobs",
        shared,
        "--dst-blobs",
        shared,
    )
    line = one_line_error(res)
    assert bad.name in line and "corrupt" in line, line
    with History.open(location=resolve_location(str(tmp_path / "dst.db"), shared, env={})) as dst:
        assert dst.counts()["runs"] == 0 and dst.counts()["launches"] == 0  # nothing naming it was written


def test_copy_history_api_refuses_alike(tmp_path: Path) -> None:
    shared = tmp_path / "blobs"
    with _history(tmp_path / "src", shared) as src, _history(tmp_path / "dst", shared) as dst:
        _record(src)
        _flip(_blob_files(shared)[0], "flipped")
        with pytest.raises(BlobCorruptError):
            copy_history(src, dst)


# -- gc --dry-run writes nothing -----------------------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file's hash but the WAL's shared-memory index (``-shm``), where every reader, the sqlite3 CLI's
    included, keeps its read marks: memory shared through a file, not the history's data."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith("-shm")
    }


def _dead_recorder_run(db: Path) -> sqlite3.Connection:
    """A run stored ``running`` by a process that is gone, its commit left in the WAL; the connection
    returned keeps the WAL from being checkpointed at close (a checkpoint would change the database file)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute(
        "UPDATE runs SET status = 'running', exit_code = NULL, pid = ?, pid_start = 1, host = ?, "
        "started_at = '2020-01-01 00:00:00.000000'",
        (dead.pid, socket.gethostname()),
    )
    conn.commit()
    return conn


def test_gc_dry_run_changes_no_byte(tmp_path: Path) -> None:
    with _history(tmp_path) as h:
        _record(h)
    keeper = _dead_recorder_run(tmp_path / "h.db")
    assert (tmp_path / "h.db-wal").stat().st_size > 0
    where = ["--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs"]
    before = _snapshot(tmp_path)
    res = tilelens_in_process(*where, "gc", "--dry-run", "--older-than", "1d", "--grace", "0", "--json")
    assert res.returncode == 0, res.stderr
    assert '"runs": 1' in res.stdout  # the dead recorder's run counts as lost, as the real gc would see it
    assert _snapshot(tmp_path) == before  # no lost-run repair, no checkpoint, no file touched
    keeper.close()
    res = tilelens_in_process(*where, "gc", "--older-than", "1d", "--grace", "0", "--json")
    assert res.returncode == 0 and '"runs": 1' in res.stdout


def _read_only_mount(folder: Path, mount: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    mount.mkdir()
    script = f"mount --bind '{folder}' '{mount}' && mount -o remount,ro,bind '{mount}' && exec \"$@\""
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", *command], capture_output=True, text=True, check=False
    )


@pytest.fixture
def can_mount(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    res = _read_only_mount(probe, tmp_path / "probe-ro", ["true"])
    if res.returncode != 0:
        pytest.skip(f"cannot make a read-only bind mount here: {res.stderr.strip()}")


def test_gc_dry_run_and_copy_from_a_read_only_mount(tmp_path: Path, can_mount: None) -> None:
    folder = tmp_path / "hist"
    with _history(folder) as h:
        _record(h)
    mount = tmp_path / "ro"
    argv = [*tilelens_argv(), "--db", str(mount / "h.db"), "--blobs", str(mount / "blobs")]
    res = _read_only_mount(folder, mount, [*argv, "gc", "--dry-run"])
    assert res.returncode == 0, res.stderr
    assert "would remove" in res.stdout
    dst = tmp_path / "dst.db"
    res = _read_only_mount(
        folder,
        tmp_path / "ro2",
        [*tilelens_argv(), "db", "copy", str(tmp_path / "ro2" / "h.db"), str(dst), "--src-blobs",
         str(tmp_path / "ro2" / "blobs")],
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "copied 1 run (1->1)" in res.stdout
    with History.open(location=resolve_location(str(dst), env={})) as copied:
        assert copied.counts()["launches"] == 2


# -- one line, not a traceback ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--older-than", "99999999999d"],
        ["--older-than", "3000000d"],
        ["--older-than", "999999w"],
        ["--older-than", "0001-01-01"],
        ["--grace", "99999999999d"],
    ],
)
def test_gc_out_of_range_ages_are_one_line(history_url: str, tmp_path: Path, args: list[str]) -> None:
    where = ["--db", history_url, "--blobs", tmp_path / "blobs"]
    assert tilelens_in_process(*where, "db", "upgrade").returncode == 0
    line = one_line_error(tilelens_in_process(*where, "gc", *args))
    assert "too long a time" in line or "out of range" in line, line


@pytest.mark.parametrize("table", ["launch_args", "blobs"])
def test_a_history_missing_a_table_says_it_is_damaged(tmp_path: Path, table: str) -> None:
    with _history(tmp_path) as h:
        _record(h)
    conn = sqlite3.connect(tmp_path / "h.db")
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()
    where = ["--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs"]
    for command in (["gc"], ["db", "current"], ["db", "upgrade"]):
        line = one_line_error(tilelens_in_process(*where, *command))
        assert "is damaged: it is stamped at revision" in line and table in line, (command, line)


def test_gc_and_copy_refuse_a_blob_folder_that_is_a_file(tmp_path: Path) -> None:
    with _history(tmp_path / "src") as h:
        _record(h)
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    line = one_line_error(tilelens_in_process("--db", tmp_path / "src" / "h.db", "--blobs", a_file, "gc"))
    assert "not a folder" in line
    dst = tmp_path / "dst.db"
    line = one_line_error(
        tilelens_in_process("db", "copy", tmp_path / "src" / "h.db", dst, "--dst-blobs", a_file)
    )
    assert "not a folder" in line
    assert not dst.exists()  # no empty target left behind
