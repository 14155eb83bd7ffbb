"""Where a history lives: one resolution for flags, environment and defaults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tilelens.config import Location, LocationError, resolve_location


def test_default_is_dot_tilelens_in_cwd(tmp_path: Path) -> None:
    loc = resolve_location(env={}, cwd=tmp_path)
    assert loc == Location(f"sqlite:///{tmp_path}/.tilelens/tilelens.db", tmp_path / ".tilelens" / "blobs")
    assert loc.sqlite_path == tmp_path / ".tilelens" / "tilelens.db"


def test_uses_process_environment_and_cwd_when_not_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TILELENS_DB")
    monkeypatch.delenv("TILELENS_BLOBS")
    monkeypatch.chdir(tmp_path)
    assert resolve_location().blobs_dir == tmp_path / ".tilelens" / "blobs"


def test_environment_overrides_default(tmp_path: Path) -> None:
    env = {"TILELENS_DB": "sqlite:////data/h.db", "TILELENS_BLOBS": "/data/b"}
    assert resolve_location(env=env, cwd=tmp_path) == Location("sqlite:////data/h.db", Path("/data/b"))


def test_arguments_override_environment(tmp_path: Path) -> None:
    env = {"TILELENS_DB": "sqlite:////env/h.db", "TILELENS_BLOBS": "/env/b"}
    loc = resolve_location("sqlite:////arg/h.db", "/arg/b", env=env, cwd=tmp_path)
    assert loc == Location("sqlite:////arg/h.db", Path("/arg/b"))


def test_blobs_default_beside_the_sqlite_file_even_when_db_comes_from_env(tmp_path: Path) -> None:
    loc = resolve_location(env={"TILELENS_DB": "sqlite:////srv/x/hist.db"}, cwd=tmp_path)
    assert loc.blobs_dir == Path("/srv/x/blobs")


def test_empty_environment_values_count_as_unset(tmp_path: Path) -> None:
    loc = resolve_location(env={"TILELENS_DB": "", "TILELENS_BLOBS": ""}, cwd=tmp_path)
    assert loc == resolve_location(env={}, cwd=tmp_path)


def test_plain_relative_path_becomes_absolute_sqlite_url(tmp_path: Path) -> None:
    loc = resolve_location("runs/../h.db", env={}, cwd=tmp_path)
    assert loc.db_url == f"sqlite:///{tmp_path}/h.db"
    assert loc.blobs_dir == tmp_path / "blobs"


def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    loc = resolve_location("~/h.db", "~/b", env={}, cwd="/")
    assert loc == Location(f"sqlite:///{tmp_path}/h.db", tmp_path / "b")


def test_relative_sqlite_url_is_pinned_to_cwd_and_keeps_query(tmp_path: Path) -> None:
    loc = resolve_location("sqlite:///sub/h.db?timeout=5", env={}, cwd=tmp_path)
    assert loc.db_url == f"sqlite:///{tmp_path}/sub/h.db?timeout=5"
    assert loc.blobs_dir == tmp_path / "sub" / "blobs"


def test_relative_blobs_dir_is_made_absolute(tmp_path: Path) -> None:
    assert resolve_location(blobs="b", env={}, cwd=tmp_path).blobs_dir == tmp_path / "b"


def test_server_url_kept_and_blobs_default_to_dot_tilelens(tmp_path: Path) -> None:
    loc = resolve_location("postgresql://me:secret@db.example/tl", env={}, cwd=tmp_path)
    assert loc.db_url == "postgresql://me:secret@db.example/tl"
    assert loc.sqlite_path is None
    assert loc.blobs_dir == tmp_path / ".tilelens" / "blobs"
    assert "secret" not in loc.display_url()


def test_in_memory_sqlite_has_no_file() -> None:
    assert Location("sqlite://", Path("/b")).sqlite_path is None
    assert Location("sqlite://", Path("/b")).in_memory


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite+pysqlite://",
        "sqlite+pysqlite:///:memory:",
        "sqlite:///file::memory:?cache=shared",
        "sqlite:///file:shared1?mode=memory&cache=shared&uri=true",
    ],
)
def test_in_memory_sqlite_is_refused(tmp_path: Path, url: str) -> None:
    """A history in memory vanishes at exit: `record` would "succeed" and keep nothing."""
    with pytest.raises(LocationError, match="in-memory SQLite database") as info:
        resolve_location(url, env={}, cwd=tmp_path)
    assert str(info.value).startswith(f"{url} is an in-memory")
    with pytest.raises(LocationError, match="in-memory"):
        resolve_location(None, env={"TILELENS_DB": url}, cwd=tmp_path)


@pytest.mark.parametrize(
    "db", ["sqlite:///file:x.db?uri=true", ":memory:", "sqlite:////tmp/m.db", "postgresql://h/x"]
)
def test_files_and_servers_are_not_in_memory(tmp_path: Path, db: str) -> None:
    assert not resolve_location(db, env={}, cwd=tmp_path).in_memory


def test_bad_url_is_a_location_error(tmp_path: Path) -> None:
    with pytest.raises(LocationError, match="not a database URL"):
        resolve_location("postgresql://host:notaport/x", env={}, cwd=tmp_path)


def test_location_is_frozen() -> None:
    loc = Location("sqlite:////h.db", Path("/b"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        loc.db_url = "x"  # type: ignore[misc]
