"""Where a history lives: one resolution for flags, environment and defaults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tilelens.config import Location, LocationError, Settings, SettingsError, load_settings, resolve_location


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


# -- discovery, [tool.tilelens], precedence --------------------------------------------------------------


def _history_dir(folder: Path) -> Path:
    (folder / ".tilelens").mkdir(parents=True)
    return folder / ".tilelens"


def test_history_in_a_parent_is_found_like_git(tmp_path: Path) -> None:
    found = _history_dir(tmp_path / "proj")
    cwd = tmp_path / "proj" / "src" / "deep"
    cwd.mkdir(parents=True)
    loc = resolve_location(env={}, cwd=cwd, home=tmp_path)
    assert loc == Location(f"sqlite:///{found}/tilelens.db", found / "blobs")
    assert loc.searched_from is None


def test_nearest_history_wins(tmp_path: Path) -> None:
    _history_dir(tmp_path / "proj")
    inner = _history_dir(tmp_path / "proj" / "sub")
    assert resolve_location(env={}, cwd=inner.parent, home=tmp_path).blobs_dir == inner / "blobs"


def test_search_stops_below_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _history_dir(home)
    cwd = home / "proj"
    cwd.mkdir()
    loc = resolve_location(env={}, cwd=cwd, home=home)
    assert loc == Location(f"sqlite:///{cwd}/.tilelens/tilelens.db", cwd / ".tilelens" / "blobs")
    assert loc.searched_from == cwd
    # Working in home itself, its own .tilelens is the default anyway.
    assert resolve_location(env={}, cwd=home, home=home).blobs_dir == home / ".tilelens" / "blobs"


def test_outside_home_the_search_goes_up_to_the_root(tmp_path: Path) -> None:
    found = _history_dir(tmp_path / "srv")
    cwd = tmp_path / "srv" / "a"
    cwd.mkdir()
    assert resolve_location(env={}, cwd=cwd, home=tmp_path / "elsewhere").blobs_dir == found / "blobs"


def test_no_history_anywhere_names_the_search(tmp_path: Path) -> None:
    cwd = tmp_path / "a"
    cwd.mkdir()
    loc = resolve_location(env={}, cwd=cwd, home=tmp_path)
    assert loc.searched_from == cwd
    assert loc.no_history_message().startswith(f"no TileLens history in {cwd} or any parent")
    assert loc.no_history_message().endswith(" (use --db or TILELENS_DB)")
    named = resolve_location(str(cwd / "h.db"), env={}, cwd=cwd, home=tmp_path)
    assert named.no_history_message() == f"no TileLens history at {cwd / 'h.db'}"


def _pyproject(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text('[project]\nname = "demo"\n\n' + body)
    return path


def test_pyproject_paths_are_relative_to_the_file_from_a_subfolder(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    pyproject = _pyproject(proj, '[tool.tilelens]\ndb = "runs/h.db"\nblobs = "../shared-blobs"\ntag = "ci"\n')
    cwd = proj / "src" / "pkg"
    cwd.mkdir(parents=True)
    settings = load_settings(env={}, cwd=cwd, home=tmp_path)
    assert settings == Settings(
        db=f"sqlite:///{proj}/runs/h.db", blobs=str(tmp_path / "shared-blobs"), tag="ci", autotune="first"
    )
    assert settings.pyproject == pyproject
    loc = resolve_location(env={}, cwd=cwd, home=tmp_path)
    assert loc == Location(f"sqlite:///{proj}/runs/h.db", tmp_path / "shared-blobs")


def test_pyproject_db_alone_keeps_blobs_beside_it(tmp_path: Path) -> None:
    _pyproject(tmp_path / "proj", '[tool.tilelens]\ndb = "sqlite:///var/h.db"\n')
    loc = resolve_location(env={}, cwd=tmp_path / "proj", home=tmp_path)
    assert loc == Location(f"sqlite:///{tmp_path}/proj/var/h.db", tmp_path / "proj" / "var" / "blobs")


def test_nearest_pyproject_without_the_table_is_skipped(tmp_path: Path) -> None:
    _pyproject(tmp_path / "proj", '[tool.tilelens]\nautotune = "all"\n')
    _pyproject(tmp_path / "proj" / "sub", '[tool.ruff]\nline-length = 100\ndependencies = ["tilelens"]\n')
    (tmp_path / "proj" / "other").mkdir()
    (tmp_path / "proj" / "other" / "pyproject.toml").write_text("this is [not toml")  # never reached
    assert load_settings(env={}, cwd=tmp_path / "proj" / "sub", home=tmp_path).autotune == "all"


def test_no_pyproject_gives_the_defaults(tmp_path: Path) -> None:
    assert load_settings(env={}, cwd=tmp_path, home=tmp_path) == Settings()
    assert Settings().autotune == "first" and Settings().tag is None


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"flag": True, "env": True, "toml": True}, "flag"),
        ({"env": True, "toml": True}, "env"),
        ({"toml": True}, "toml"),
        ({}, "found"),
    ],
)
def test_precedence_flag_env_pyproject_discovered_default(
    tmp_path: Path, given: dict[str, bool], expected: str
) -> None:
    proj = tmp_path / "proj"
    _history_dir(proj)
    if given.get("toml"):
        _pyproject(proj, '[tool.tilelens]\ndb = "toml.db"\nblobs = "toml-blobs"\n')
    env = {"TILELENS_DB": "env.db", "TILELENS_BLOBS": "env-blobs"} if given.get("env") else {}
    cwd = proj / "sub"
    cwd.mkdir()
    flags = ("flag.db", "flag-blobs") if given.get("flag") else (None, None)
    loc = resolve_location(*flags, env=env, cwd=cwd, home=tmp_path)
    want = {
        "flag": Location(f"sqlite:///{cwd}/flag.db", cwd / "flag-blobs"),
        "env": Location(f"sqlite:///{cwd}/env.db", cwd / "env-blobs"),
        "toml": Location(f"sqlite:///{proj}/toml.db", proj / "toml-blobs"),
        "found": Location(f"sqlite:///{proj}/.tilelens/tilelens.db", proj / ".tilelens" / "blobs"),
    }
    assert loc == want[expected]


def test_environment_tag_and_autotune_override_pyproject(tmp_path: Path) -> None:
    _pyproject(tmp_path, '[tool.tilelens]\ntag = "toml"\nautotune = "all"\n')
    env = {"TILELENS_TAG": "env", "TILELENS_AUTOTUNE": "first"}
    assert load_settings(env=env, cwd=tmp_path, home=tmp_path) == Settings(tag="env", autotune="first")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[tool.tilelens\ndb = 1\n", "not valid TOML"),
        (
            '[tool.tilelens]\ndbb = "x.db"\n',
            "unknown [tool.tilelens] setting 'dbb' (known: db, blobs, tag, autotune, on_oob, backend, snapshots)",
        ),
        ('[tool.tilelens]\nautotune = "some"\n', "[tool.tilelens] autotune must be first or all, not 'some'"),
        ("[tool.tilelens]\ntag = 3\n", "[tool.tilelens] tag must be a non-empty string, not 3"),
        ('[tool.tilelens]\ndb = "postgresql://h:port/x"\n', "[tool.tilelens] db: not a database URL"),
        ('[tool]\ntilelens = "db.sqlite"\n', "tool.tilelens must be a table"),
    ],
)
def test_bad_pyproject_is_one_line_naming_the_file(tmp_path: Path, body: str, message: str) -> None:
    path = _pyproject(tmp_path, body)
    with pytest.raises(SettingsError) as err:
        load_settings(env={}, cwd=tmp_path, home=tmp_path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"^TILELENS_AUTOTUNE must be first or all, not 'every'$"):
        load_settings(env={"TILELENS_AUTOTUNE": "every"}, cwd=tmp_path, home=tmp_path)


def test_on_oob_comes_from_pyproject_and_the_argument_wins(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """[tool.tilelens] on_oob is the recording's default policy; an explicit on_oob= still wins."""
    from tilelens.core.recording.recording import Recording

    (tmp_path / "pyproject.toml").write_text('[tool.tilelens]\non_oob = "raise"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TILELENS_ON_OOB", raising=False)
    assert load_settings(home=tmp_path.parent).on_oob == "raise"
    assert Recording(tmp_path / "h.db").on_oob == "raise"
    assert Recording(tmp_path / "h.db", on_oob="record").on_oob == "record"
    (tmp_path / "pyproject.toml").write_text('[tool.tilelens]\non_oob = "ignore"\n')
    with pytest.raises(SettingsError, match="on_oob"):
        load_settings(home=tmp_path.parent)


def test_backend_and_snapshots_come_from_pyproject_and_arguments_win(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """[tool.tilelens] backend/snapshots are a recording's defaults (issue 15); explicit arguments still win."""
    from tilelens.core.recording.recording import Recording

    (tmp_path / "pyproject.toml").write_text('[tool.tilelens]\nbackend = "compiled"\nsnapshots = "first"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TILELENS_BACKEND", raising=False)
    monkeypatch.delenv("TILELENS_SNAPSHOTS", raising=False)
    rec = Recording(tmp_path / "h.db")
    assert (rec.backend, rec.snapshot_policy.mode) == ("compiled", "first")
    rec = Recording(tmp_path / "h.db", backend="interpreter", snapshots="none")
    assert (rec.backend, rec.snapshot_policy.mode) == ("interpreter", "none")
    monkeypatch.setenv("TILELENS_SNAPSHOTS", "all")
    assert Recording(tmp_path / "h.db").snapshot_policy.mode == "all"
    (tmp_path / "pyproject.toml").write_text('[tool.tilelens]\nbackend = "gpu"\n')
    with pytest.raises(SettingsError, match="backend"):
        load_settings(home=tmp_path.parent)
