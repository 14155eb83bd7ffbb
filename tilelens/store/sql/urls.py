"""Database URLs: what SQLAlchemy makes of the text after ``--db``, for :mod:`tilelens.config` too.

Only the store imports SQLAlchemy; configuration resolves locations with these functions instead. They import
SQLAlchemy when called, never at import, so a plain database path is resolved without it (``tilelens ls`` on a
SQLite file never loads SQLAlchemy at all). PostgreSQL URLs are read here without SQLAlchemy too, with the
standard library, so that the read commands against a server import only its driver: SQLAlchemy alone costs
more than a whole ``tilelens ls`` may take. Both readings agree on every URL form SQLAlchemy documents for
PostgreSQL: ``postgresql[+driver]://user:password@host:port/database?key=value``, the host possibly empty and
given as ``?host=/socket/folder`` instead.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import TYPE_CHECKING

from tilelens.errors import LocationError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["URL", "backend_of", "is_postgres", "mask_password", "parse_url", "postgres_connect_args"]

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
POSTGRES_BACKENDS = ("postgresql", "postgres")


def parse_url(text: str) -> URL:
    """``text`` as a SQLAlchemy URL; :class:`LocationError` when it cannot be one."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(text)
    except (ArgumentError, ValueError) as exc:  # ValueError: e.g. a non-numeric port
        raise LocationError(f"not a database URL: {text!r} ({exc})") from None


def backend_of(text: str) -> str | None:
    """The dialect a URL names (``postgresql`` for ``postgresql+psycopg://...``); None for a plain path."""
    match = _SCHEME_RE.match(text)
    return match.group(1).split("+", 1)[0].lower() if match else None


def is_postgres(text: str) -> bool:
    return backend_of(text) in POSTGRES_BACKENDS


def _split(text: str) -> urllib.parse.SplitResult:
    parts = urllib.parse.urlsplit(text)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise LocationError(f"not a database URL: {text!r} ({exc})") from None
    return parts


def check_postgres_url(text: str) -> str:
    """A PostgreSQL URL, validated as SQLAlchemy would (a bad port is a LocationError), returned unchanged."""
    _split(text)
    return text


def mask_password(text: str) -> str:
    """The URL with its password shown as ``***``, as SQLAlchemy's ``hide_password`` renders it."""
    parts = urllib.parse.urlsplit(text)
    if parts.password is None:
        return text
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{hostport}"))


def postgres_connect_args(text: str) -> dict[str, str]:
    """Keyword arguments for ``psycopg.connect`` that reach the database a PostgreSQL URL names.

    Query parameters pass through as libpq connection parameters (``host=/socket/folder``, ``sslmode=...``),
    as SQLAlchemy's psycopg dialect passes them.
    """
    parts = _split(text)
    args: dict[str, str] = {}
    userinfo, _, hostport = parts.netloc.rpartition("@")
    if userinfo:
        user, sep, password = userinfo.partition(":")
        if user:
            args["user"] = urllib.parse.unquote(user)
        if sep:
            args["password"] = urllib.parse.unquote(password)
    host = parts.hostname
    if host:
        args["host"] = urllib.parse.unquote(host)
    if parts.port is not None:
        args["port"] = str(parts.port)
    database = urllib.parse.unquote(parts.path.lstrip("/"))
    if database:
        args["dbname"] = database
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        args[key] = value
    return args
