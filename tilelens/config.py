"""Where a TileLens history lives.

Every entry point (CLI, Python API, Alembic's own CLI, tests) resolves the location through
:func:`resolve_location`, so a history written by ``tilelens record`` is the one that ``tilelens ls`` reads,
whatever mix of flags, environment variables and working directories was involved.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from tilelens.errors import LocationError as LocationError  # what a bad URL raises (through store.urls)

if TYPE_CHECKING:
    from tilelens.store.urls import URL

ENV_DB = "TILELENS_DB"
ENV_BLOBS = "TILELENS_BLOBS"
DEFAULT_DIR = ".tilelens"
DEFAULT_DB_FILE = "tilelens.db"
DEFAULT_BLOBS_DIR = "blobs"

# A SQLAlchemy URL starts with "dialect[+driver]://"; anything else is taken as a filesystem path.
_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


@dataclass(frozen=True)
class Location:
    """A resolved history: the database holding rows and the folder holding the blobs they reference."""

    db_url: str
    blobs_dir: Path

    @property
    def url(self) -> URL:
        from tilelens.store.urls import parse_url  # URLs are the store's: SQLAlchemy parses them

        return parse_url(self.db_url)

    @property
    def sqlite_path(self) -> Path | None:
        """The database file, for file-backed SQLite; None for servers and in-memory databases."""
        match = _PLAIN_SQLITE_URL.match(self.db_url)
        if match is not None:  # what a plain path resolves to: no need to import SQLAlchemy to read it
            return _sqlite_database(unquote(match.group(1)))
        return _sqlite_file(self.url)

    def display_url(self) -> str:
        """The URL safe to print: passwords are masked."""
        return self.url.render_as_string(hide_password=True)

    @property
    def in_memory(self) -> bool:
        """An in-memory SQLite database (``sqlite://``, ``:memory:``, ``mode=memory``): gone at exit."""
        match = _PLAIN_SQLITE_URL.match(self.db_url)
        if match is not None:  # as in sqlite_path: no SQLAlchemy import for the common case
            return _memory_database(unquote(match.group(1)), "")
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
    from tilelens.store.urls import parse_url

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
) -> Location:
    """Resolve explicit arguments, then ``TILELENS_DB``/``TILELENS_BLOBS``, then ``./.tilelens``.

    ``db`` is a SQLAlchemy URL or a plain filesystem path (taken as a SQLite file); an in-memory SQLite URL
    is refused with :class:`LocationError` (nothing recorded there would outlive the process). When the blobs folder is
    not given and the database is a SQLite file, blobs live in ``blobs/`` beside that file, so that moving
    or copying the folder moves the whole history. ``env`` and ``cwd`` exist for tests.
    """
    env = os.environ if env is None else env
    base = Path.cwd() if cwd is None else Path(cwd)
    db = db or env.get(ENV_DB) or None
    blobs = blobs or env.get(ENV_BLOBS) or None

    if db is None:
        db_url = _normalise_db(str(base / DEFAULT_DIR / DEFAULT_DB_FILE), base)
    else:
        db_url = _normalise_db(str(db), base)
    Location(db_url, base).refuse_in_memory(shown=None if db is None else str(db))

    if blobs is not None:
        blobs_dir = _absolute(blobs, base)
    else:
        sqlite_file = Location(db_url, base).sqlite_path
        parent = sqlite_file.parent if sqlite_file is not None else base / DEFAULT_DIR
        blobs_dir = _absolute(parent / DEFAULT_BLOBS_DIR, base)
    return Location(db_url=db_url, blobs_dir=blobs_dir)
