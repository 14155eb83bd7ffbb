"""Fixtures shared by all tests.

Every test runs with TILELENS_DB / TILELENS_BLOBS pointing into its own tmp_path, so nothing a test does (or
forgets to pass) can reach the history in the working directory, and xdist workers never share one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tilelens.config import Location, resolve_location
from tilelens.store import History


@pytest.fixture(autouse=True)
def _isolated_history_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path_factory.mktemp("default-history")
    monkeypatch.setenv("TILELENS_DB", str(root / "tilelens.db"))
    monkeypatch.setenv("TILELENS_BLOBS", str(root / "blobs"))


@pytest.fixture
def history_location(tmp_path: Path) -> Location:
    """A not-yet-created history in this test's tmp_path (database file plus blobs/ beside it)."""
    return resolve_location(str(tmp_path / "history" / "tilelens.db"), env={})


@pytest.fixture
def history(history_location: Location) -> Iterator[History]:
    """An open, migrated, empty history; closed after the test."""
    with History.open(location=history_location) as h:
        yield h
