"""Where a TileLens history lives, and the project settings around it.

Every entry point (CLI, Python API, Alembic's own CLI, tests) resolves the location through
:func:`resolve_location`, so a history written by ``tilelens record`` is the one that ``tilelens ls`` reads,
whatever mix of flags, environment variables and working directories was involved. Each value is the first
of, per value (database, blobs):

1. an explicit argument (``--db``/``--blobs``, ``db=``/``blobs=``);
2. the environment (``TILELENS_DB``, ``TILELENS_BLOBS``; relative paths against the working directory);
3. ``[tool.tilelens]`` in the nearest ``pyproject.toml`` that has that table, in the working directory or a
   parent (relative paths against that file's folder);
4. a ``.tilelens/`` folder in the working directory or a parent, found as git finds ``.git``;
5. ``./.tilelens`` in the working directory (where ``record`` creates one).

Both searches go up to the filesystem root, but stop below the home directory when the working directory is
inside it: a ``~/.tilelens`` left by one command run from home would otherwise collect the runs of every
project below home that has no history of its own. Blobs not given anywhere live in ``blobs/`` beside a SQLite
database file, else in the history folder of steps 4/5.

:class:`Settings` holds the other project options (``tag``, ``autotune``) with the same sources: a field of
it is one option, read from ``[tool.tilelens]`` under its name and from ``TILELENS_<NAME>``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from tilelens.errors import LocationError as LocationError  # what a bad URL raises (through store.urls)
from tilelens.errors import SettingsError as SettingsError  # what bad [tool.tilelens] or TILELENS_* raise

if TYPE_CHECKING:
    from tilelens.store.sql.urls import URL

ENV_DB = "TILELENS_DB"
ENV_BLOBS = "TILELENS_BLOBS"
DEFAULT_DIR = ".tilelens"
DEFAULT_DB_FILE = "tilelens.db"
DEFAULT_BLOBS_DIR = "blobs"

# A SQLAlchemy URL starts with "dialect[+driver]://"; anything else is taken as a filesystem path.
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


ENV_PREFIX = "TILELENS_"
PYPROJECT = "pyproject.toml"


@dataclass(frozen=True)
class Location:
    """A resolved history: the database holding rows and the folder holding the blobs they reference.

    ``searched_from`` is set only when nothing named the database and no ``.tilelens`` was found: the
    working directory whose ``./.tilelens`` this is (so a reader can say where it looked).
    """

    db_url: str
    blobs_dir: Path
    searched_from: Path | None = field(default=None, compare=False)

    def no_history_message(self) -> str:
        """What a reader says when there is no history here."""
        if self.searched_from is not None:
            return (
                f"no TileLens history in {self.searched_from} or any parent{_search_limit(self.searched_from)}"
                " (use --db or TILELENS_DB)"
            )
        return f"no TileLens history at {self.sqlite_path or self.display_url()}"

    @property
    def url(self) -> URL:
        from tilelens.store.sql.urls import parse_url  # URLs are the store's: SQLAlchemy parses them

        return parse_url(self.db_url)

    @property
    def sqlite_path(self) -> Path | None:
        """The database file, for file-backed SQLite; None for servers and in-memory databases."""
        match = _PLAIN_SQLITE_URL.match(self.db_url)
        if match is not None:  # what a plain path resolves to: no need to import SQLAlchemy to read it
            return _sqlite_database(unquote(match.group(1)))
        from tilelens.store.sql.urls import is_postgres

        if is_postgres(self.db_url):  # a server: no file, and no SQLAlchemy needed to say so
            return None
        return _sqlite_file(self.url)

    def display_url(self) -> str:
        """The URL safe to print: passwords are masked."""
        from tilelens.store.sql.urls import is_postgres, mask_password

        if is_postgres(self.db_url):
            return mask_password(self.db_url)
        return self.url.render_as_string(hide_password=True)

    @property
    def in_memory(self) -> bool:
        """An in-memory SQLite database (``sqlite://``, ``:memory:``, ``mode=memory``): gone at exit."""
        match = _PLAIN_SQLITE_URL.match(self.db_url)
        if match is not None:  # as in sqlite_path: no SQLAlchemy import for the common case
            return _memory_database(unquote(match.group(1)), "")
        from tilelens.store.sql.urls import is_postgres

        if is_postgres(self.db_url):  # a server, never in memory: no SQLAlchemy needed to say so
            return False
        url = self.url
        if url.get_backend_name() != "sqlite":
            return False
        return _memory_database(url.database or "", " ".join(f"{k}={v}" for k, v in url.query.items()))

    def refuse_in_memory(self, shown: str | None = None) -> None:
        """Raise LocationError for an in-memory database: a history there would vanish when TileLens exits."""
        if self.in_memory:
            raise LocationError(
                f"{shown or self.display_url()} is an in-memory SQLite database: a history there vanishes when "
                "tilelens exits; give a file path or a sqlite:////absolute/path.db URL"
            )


# "sqlite:///<database>" with no driver and no query: render_as_string quotes the database with safe=" +/".
_PLAIN_SQLITE_URL = re.compile(r"^sqlite:///([^?#]*)$")


def _sqlite_file(url: URL) -> Path | None:
    if url.get_backend_name() != "sqlite":
        return None
    return _sqlite_database(url.database)


def _memory_database(database: str, query: str) -> bool:
    if database in ("", ":memory:"):
        return True
    return database.startswith("file:") and (
        database.startswith("file::memory:") or "mode=memory" in database or "mode=memory" in query
    )


def _sqlite_database(database: str | None) -> Path | None:
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def _absolute(path: str | Path, cwd: Path) -> Path:
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = cwd / p
    # Normalise ".." without resolving symlinks: the user's spelling of a linked folder is kept.
    return Path(os.path.normpath(p))


def _normalise_db(db: str, cwd: Path) -> str:
    if not _URL_RE.match(db):
        # Exactly URL.create("sqlite", database=...).render_as_string(), without importing SQLAlchemy.
        return "sqlite:///" + quote(str(_absolute(db, cwd)), safe=" +/")
    from tilelens.store.sql.urls import check_postgres_url, is_postgres, parse_url

    if is_postgres(db):  # validated without SQLAlchemy: the read commands against a server stay light
        return check_postgres_url(db)

    url = parse_url(db)  # LocationError when it is not a URL
    path = _sqlite_file(url)
    if path is not None and not path.is_absolute():
        # A relative sqlite URL would mean a different file in every working directory; pin it now.
        url = url.set(database=str(_absolute(path, cwd)))
    return url.render_as_string(hide_password=False)


def resolve_location(
    db: str | None = None,
    blobs: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    home: str | Path | None = None,
    settings: Settings | None = None,
) -> Location:
    """The history named by arguments, environment, ``[tool.tilelens]``, a ``.tilelens`` found upwards, or ``./``.

    ``db`` is a SQLAlchemy URL or a plain filesystem path (taken as a SQLite file); an in-memory SQLite URL
    is refused with :class:`LocationError` (nothing recorded there would outlive the process). When the blobs folder is
    not given and the database is a SQLite file, blobs live in ``blobs/`` beside that file, so that moving
    or copying the folder moves the whole history. ``env``, ``cwd`` and ``home`` (where the upward searches
    stop) exist for tests; ``settings`` when the caller already loaded them.
    """
    env = os.environ if env is None else env
    base = Path.cwd() if cwd is None else Path(cwd)
    if settings is None:
        settings = load_settings(env=env, cwd=base, home=home)
    db_url = _normalise_db(str(db), base) if db else settings.db
    blobs_dir = _absolute(blobs, base) if blobs else (Path(settings.blobs) if settings.blobs else None)

    searched_from = None
    if db_url is None or (blobs_dir is None and Location(db_url, base).sqlite_path is None):
        found = find_history_dir(base, home=home)
        folder = found if found is not None else base / DEFAULT_DIR
        if db_url is None:
            db_url = _normalise_db(str(folder / DEFAULT_DB_FILE), base)
            searched_from = base if found is None else None
    else:
        folder = base / DEFAULT_DIR
    Location(db_url, base).refuse_in_memory(shown=str(db) if db else None)
    if blobs_dir is None:
        sqlite_file = Location(db_url, base).sqlite_path
        parent = sqlite_file.parent if sqlite_file is not None else folder
        blobs_dir = _absolute(parent / DEFAULT_BLOBS_DIR, base)
    return Location(db_url=db_url, blobs_dir=blobs_dir, searched_from=searched_from)


# -- upward search -----------------------------------------------------------------------------------------


def search_dirs(start: Path, *, home: str | Path | None = None) -> Iterator[Path]:
    """``start`` and its parents, up to the filesystem root, or up to (not including) home when under it."""
    start = _absolute(start, Path.cwd())
    limit = _home(home)
    below_home = limit is not None and start != limit and start.is_relative_to(limit)
    for folder in (start, *start.parents):
        if below_home and folder == limit:
            return
        yield folder


def _home(home: str | Path | None) -> Path | None:
    if home is not None:
        return _absolute(home, Path.cwd())
    try:
        return _absolute(Path.home(), Path.cwd())
    except RuntimeError:  # no HOME and no passwd entry
        return None


def _search_limit(start: Path) -> str:
    limit = _home(None)
    if limit is not None and start != limit and start.is_relative_to(limit):
        return f" below {limit}"
    return ""


def find_history_dir(start: Path, *, home: str | Path | None = None) -> Path | None:
    """The nearest ``.tilelens`` folder in ``start`` or a parent, as git finds ``.git``; None if there is none."""
    for folder in search_dirs(start, home=home):
        candidate = folder / DEFAULT_DIR
        if candidate.is_dir():
            return candidate
    return None


# -- settings ---------------------------------------------------------------------------------------------


def _option(default: Any, kind: str = "text", choices: tuple[str, ...] = ()) -> Any:
    """One setting: ``kind`` says how a value is read (text, db, path, bool); ``choices`` limits text."""
    return field(default=default, metadata={"kind": kind, "choices": choices})


@dataclass(frozen=True)
class Settings:
    """Project options: ``TILELENS_<NAME>`` over ``[tool.tilelens]`` ``name = ...`` over the default.

    Adding an option is one line here; flags and API arguments still win over it where they are given.
    Values are checked when loaded; ``db`` is a normalised URL and ``blobs`` an absolute path.
    """

    db: str | None = _option(None, "db")  # database URL or path
    blobs: str | None = _option(None, "path")  # blob folder
    tag: str | None = _option(None)  # label of recorded runs
    autotune: str = _option("first", choices=("first", "all"))  # autotune policy of recordings
    on_oob: str = _option(
        "record", choices=("record", "raise")
    )  # out-of-bounds policy (tilelens.core.engine.bounds)
    backend: str = _option("interpreter", choices=("interpreter", "compiled"))  # where recorded kernels run
    snapshots: str = _option("all", choices=("all", "first", "none"))  # compiled recordings' tensor snapshots
    pyproject: Path | None = field(default=None, compare=False)  # the file [tool.tilelens] came from


def load_settings(
    *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None, home: str | Path | None = None
) -> Settings:
    """Settings for the working directory: its nearest ``[tool.tilelens]``, then ``TILELENS_*`` over it.

    Raises :class:`SettingsError` (one line naming the file or variable) for unreadable TOML, an unknown key
    or a bad value.
    """
    env = os.environ if env is None else env
    base = Path.cwd() if cwd is None else Path(cwd)
    options = {f.name: f for f in fields(Settings) if "kind" in f.metadata}
    values: dict[str, Any] = {}
    found = find_pyproject(base, home=home)
    if found is not None:
        pyproject, table = found
        unknown = sorted(set(table) - set(options))
        if unknown:
            raise SettingsError(
                f"{pyproject}: unknown [tool.tilelens] setting {unknown[0]!r} (known: {', '.join(options)})"
            )
        for name, raw in table.items():
            where = f"{pyproject}: [tool.tilelens] {name}"
            values[name] = _convert(options[name], raw, pyproject.parent, where)
        values["pyproject"] = pyproject
    for name, option in options.items():
        raw = env.get(ENV_PREFIX + name.upper())
        if raw:  # empty counts as unset
            values[name] = _convert(option, raw, base, ENV_PREFIX + name.upper())
    return Settings(**values)


def find_pyproject(start: Path, *, home: str | Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The nearest ``pyproject.toml`` with a ``[tool.tilelens]`` table, and that table; None if there is none.

    Files that do not mention ``tilelens`` are skipped unparsed: most commands run where there is no such
    table, and the TOML parser is not worth importing for them.
    """
    for folder in search_dirs(start, home=home):
        path = folder / PYPROJECT
        try:
            text = path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{path}: cannot read it ({exc})") from None
        if "tilelens" not in text:
            continue
        table = _parse_toml(text, path).get("tool", {}).get("tilelens")
        if table is None:
            continue
        if not isinstance(table, dict):
            raise SettingsError(f"{path}: tool.tilelens must be a table")
        return path, table
    return None


def _parse_toml(text: str, path: Path) -> dict[str, Any]:
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]  # stdlib from 3.11; mypy checks as 3.10
    except ModuleNotFoundError:  # Python 3.10: the same parser, as the tomli package
        import tomli as tomllib  # type: ignore[no-redef,unused-ignore]
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML ({exc})") from None


def _convert(option: Any, raw: Any, base: Path, where: str) -> Any:
    kind, choices = option.metadata["kind"], option.metadata["choices"]
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in _BOOLS:
            return _BOOLS[raw.lower()]
        raise SettingsError(f"{where} must be true or false, not {raw!r}")
    if not isinstance(raw, str) or not raw:
        raise SettingsError(f"{where} must be a non-empty string, not {raw!r}")
    if choices and raw not in choices:
        raise SettingsError(f"{where} must be {' or '.join(choices)}, not {raw!r}")
    if kind == "db":
        try:
            return _normalise_db(raw, base)
        except LocationError as exc:
            raise SettingsError(f"{where}: {exc}") from None
    if kind == "path":
        return str(_absolute(raw, base))
    return raw


_BOOLS = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}
