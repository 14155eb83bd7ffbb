"""Fixtures shared by all tests.

Every test runs with TILELENS_DB / TILELENS_BLOBS pointing into its own tmp_path, so nothing a test does (or
forgets to pass) can reach the history in the working directory, and xdist workers never share one.

Store, CLI, replay and view tests take a history through ONE parametrized fixture, ``history_url``
(``sqlite`` | ``postgresql``): ``history_location`` and ``history`` build on it, so such a test runs against a
SQLite file and against a fresh database on a throwaway PostgreSQL server (``tests/postgres.py``; one server
per xdist worker, started on the first PostgreSQL test and stopped at the end of the session). Without the
server binaries or the driver the PostgreSQL cases skip with the reason, except under ``CI=true``, where they
fail: CI installs PostgreSQL and must never pass by skipping it. Tests of SQLite itself take
``sqlite_location`` / ``sqlite_history``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.postgres import PostgresServer, find_bindir, missing_reason
from tilelens.config import Location, resolve_location
from tilelens.store import History

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(autouse=True)
def _isolated_history_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path_factory.mktemp("default-history")
    monkeypatch.setenv("TILELENS_DB", str(root / "tilelens.db"))
    monkeypatch.setenv("TILELENS_BLOBS", str(root / "blobs"))
    # The native accessor (tilelens.core.native): built before the first test (``_native_built``) and used
    # by every recording, never half the suite one way by the timing of a background build. The whole suite
    # runs once more with TILELENS_NATIVE=0 in CI (.ci/run); tests of both captures ask for ``capture_impl``.
    monkeypatch.setenv("TILELENS_NATIVE", os.environ.get("TILELENS_NATIVE", "1"))
    # Output goes through a pipe in tests, and a pipe honours COLUMNS: the shell's own (some export it) must
    # not decide how a table folds. Tests of widths set it themselves.
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _native_built() -> None:
    """Build the native accessor once, before any test (xdist workers wait on its build lock), so no test's
    recording, nor a CLI it starts, waits for a build. A failed build is remembered: the Python capture."""
    from tilelens.core import native

    if os.environ.get("TILELENS_NATIVE", "1") != "0":
        native.build()


@pytest.fixture(scope="session")
def native_module() -> object:
    """The native accessor, built if needed (skips without a C++ compiler, except under CI=true, which
    installs one and must never pass by skipping it)."""
    from tilelens.core import native

    path, text = native.build()
    module = native.load()
    if module is None:
        reason = (
            f"the native accessor is not available: {text[-2000:] if path is None else 'it does not load'}"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return module


@pytest.fixture(params=["python", "native"])
def capture_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> object:
    """``compiled_templates.capture`` or the native accessor's, with ``TILELENS_NATIVE`` set to match, so a
    recording started in the test uses the same one."""
    from tilelens.core.compiled.templates import capture

    if request.param == "python":
        monkeypatch.setenv("TILELENS_NATIVE", "0")
        return capture
    module = request.getfixturevalue("native_module")
    monkeypatch.setenv("TILELENS_NATIVE", "1")
    return module.capture  # type: ignore[attr-defined]


def _require_postgres() -> None:
    reason = missing_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI must test PostgreSQL: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """This worker's throwaway PostgreSQL server (skips, or fails under CI=true, when it cannot run)."""
    _require_postgres()
    bindir = find_bindir()
    assert bindir is not None
    server = PostgresServer(bindir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def new_history_url(backend: str, folder: Path, request: pytest.FixtureRequest) -> str:
    """An empty history's database for ``backend``: a SQLite file under ``folder``, or a fresh PG database."""
    if backend == "sqlite":
        return str(folder / "tilelens.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.url(server.create_database())


@pytest.fixture(params=BACKENDS)
def history_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database of a not-yet-created history, once per backend: what ``--db`` would be given."""
    return new_history_url(request.param, tmp_path / "history", request)


@pytest.fixture
def history_location(history_url: str, tmp_path: Path) -> Location:
    """A not-yet-created history (database plus blobs/ in this test's tmp_path), on each backend."""
    return resolve_location(history_url, tmp_path / "history" / "blobs", env={})


@pytest.fixture
def history(history_location: Location) -> Iterator[History]:
    """An open, migrated, empty history; closed after the test."""
    with History.open(location=history_location) as h:
        yield h


@pytest.fixture
def sqlite_location(tmp_path: Path) -> Location:
    """A not-yet-created SQLite history, for tests of SQLite itself (its file, pragmas, locking)."""
    return resolve_location(str(tmp_path / "history" / "tilelens.db"), env={})


@pytest.fixture
def sqlite_history(sqlite_location: Location) -> Iterator[History]:
    with History.open(location=sqlite_location) as h:
        yield h
