"""The ``tilelens`` command run as users run it, and one recorded history the CLI tests share.

Recording starts a process that imports torch and Triton (seconds each time), so the examples are recorded
once per test session (per xdist worker) and the read-command tests query that history; tests that change
a history record their own. ``examples_history`` is that history on each backend (tests/conftest.py): the
SQLite recording itself, and a copy of it on the throwaway PostgreSQL server made by ``tilelens db copy``'s
function. ``examples_recording`` is the SQLite recording only, for tests of the recording or of SQLite.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


# The signals the tests send to a child, or that a child sends itself. A test run started under ``nohup``, or with
# ``&`` from a script, has SIGHUP or SIGINT ignored, and its children inherit that: Python then leaves SIGINT
# ignored (no KeyboardInterrupt), and ``tilelens record`` keeps an ignored SIGHUP ignored, as the program would
# be without it. A child whose test relies on them gets the defaults back (:func:`default_signals`).
SENT_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)


def default_signals() -> None:
    """``preexec_fn`` of a child that a test signals: SENT_SIGNALS at their default disposition, unblocked,
    whatever the shell that started the test run set."""
    for sig in SENT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SENT_SIGNALS)


def tilelens_argv() -> list[str]:
    script = Path(sys.executable).with_name("tilelens")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tilelens.cli"]


def tilelens(
    *args: object, cwd: Path | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run ``tilelens ARGS`` in a fresh process; stdout and stderr are captured separately."""
    env = dict(os.environ)
    env.pop("COLUMNS", None)
    return subprocess.run(
        [*tilelens_argv(), *(str(a) for a in args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


@dataclass(frozen=True)
class Output:
    returncode: int
    stdout: str
    stderr: str


def tilelens_in_process(*args: object) -> Output:
    """``tilelens ARGS`` through the same entry point in this process: for the many cheap read-command checks.

    Read commands import neither torch nor Triton, so a fresh process would only add its start-up time;
    the process-level behaviour (exit status, stderr) is covered by the subprocess tests.
    """
    from tilelens.cli import main

    out, err = io.StringIO(), io.StringIO()
    columns = os.environ.pop(
        "COLUMNS", None
    )  # a pipe honours COLUMNS: the tests' own terminal must not count
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:
        if columns is not None:
            os.environ["COLUMNS"] = columns
    return Output(code, out.getvalue(), err.getvalue())


def run_row(db: str) -> tuple[str, int | None, int]:
    """The one run's stored status and exit code, and the launch count, read past TileLens (SQLite file or
    PostgreSQL URL)."""
    import sqlalchemy as sa

    engine = sa.create_engine(db if "://" in db else f"sqlite:///{db}")
    try:
        with engine.connect() as conn:
            ((status, exit_code),) = conn.execute(sa.text("SELECT status, exit_code FROM runs")).fetchall()
            launches = conn.execute(sa.text("SELECT count(*) FROM launches")).scalar_one()
    finally:
        engine.dispose()
    return status, exit_code, launches


def one_line_error(proc: subprocess.CompletedProcess[str] | Output) -> str:
    """The single stderr line of an input error (exit 2, no traceback)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("tilelens: error: "), lines[0]
    return lines[0]


@dataclass(frozen=True)
class Recorded:
    """The examples recorded by ``tilelens record --autotune all examples/run_all.py``."""

    db: Path | str  # the SQLite file, or a PostgreSQL URL
    blobs: Path
    label: str  # how messages name the history: the file, or the URL with its password masked
    backend: str
    proc: subprocess.CompletedProcess[str]
    run_id: int
    ids: dict[str, list[int]]  # kernel qualname -> launch ids, oldest first

    def rows(self, sql: str) -> list[tuple]:
        """Rows of ``sql`` as the read path returns them (the same values from both backends)."""
        from tilelens.config import resolve_location
        from tilelens.store.sql.readonly import open_reader

        with open_reader(resolve_location(str(self.db), self.blobs, env={})) as reader:
            return reader.execute(sql).rows

    @property
    def location(self) -> list[object]:
        # Explicit blobs: the tests' TILELENS_BLOBS changes from test to test and would win over "beside --db".
        return ["--db", self.db, "--blobs", self.blobs]

    def cli(self, *args: object) -> subprocess.CompletedProcess[str]:
        return tilelens(*self.location, *args)

    def main(self, *args: object) -> Output:
        return tilelens_in_process(*self.location, *args)


@pytest.fixture(scope="session")
def examples_recording(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    db = tmp_path_factory.mktemp("examples-history") / "h.db"
    proc = tilelens(
        "--db", db, "--blobs", db.parent / "blobs", "record", "--tag", "examples", "--autotune", "all",
        EXAMPLES / "run_all.py", "--ignored",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(db) as conn:
        (run_id,) = conn.execute("SELECT max(id) FROM runs").fetchone()
        ids: dict[str, list[int]] = {}
        for launch_id, qualname in conn.execute(
            "SELECT l.id, k.qualname FROM launches l JOIN kernels k ON k.id = l.kernel_id ORDER BY l.id"
        ):
            ids.setdefault(qualname, []).append(launch_id)
    conn.close()
    return Recorded(
        db=db, blobs=db.parent / "blobs", label=str(db), backend="sqlite", proc=proc, run_id=run_id, ids=ids
    )


@pytest.fixture(scope="session", params=BACKENDS)
def examples_history(
    request: pytest.FixtureRequest, examples_recording: Recorded, tmp_path_factory: pytest.TempPathFactory
) -> Recorded:
    """The recorded examples on each backend; on PostgreSQL a copy (new database, own blob folder)."""
    if request.param == "sqlite":
        return examples_recording
    from tilelens.store import History
    from tilelens.store.admin.copy import copy_history

    server = request.getfixturevalue("postgres_server")
    url = server.url(server.create_database("examples"))
    blobs = tmp_path_factory.mktemp("examples-postgresql") / "blobs"
    with (
        History.open(str(examples_recording.db), examples_recording.blobs) as src,
        History.open(url, blobs) as dst,
    ):
        copy_history(src, dst)
        label = dst.label
    recorded = Recorded(url, blobs, label, "postgresql", examples_recording.proc, 0, {})
    (run_id,) = recorded.rows("SELECT max(id) FROM runs")[0]
    ids: dict[str, list[int]] = {}
    for launch_id, qualname in recorded.rows(
        "SELECT l.id, k.qualname FROM launches l JOIN kernels k ON k.id = l.kernel_id ORDER BY l.id"
    ):
        ids.setdefault(qualname, []).append(launch_id)
    return Recorded(url, blobs, label, "postgresql", examples_recording.proc, run_id, ids)


class Terminal(io.StringIO):
    """Standard output as a terminal (of ``COLUMNS`` columns): what the table tests print to."""

    def isatty(self) -> bool:
        return True


ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time is UTC for the test: printed times do not depend on the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
