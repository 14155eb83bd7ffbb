"""Database URLs: what SQLAlchemy makes of the text after ``--db``, for :mod:`tilelens.config` too.

Only the store imports SQLAlchemy; configuration resolves locations with these functions instead. They import
SQLAlchemy when called, never at import, so a plain database path is resolved without it (``tilelens ls`` on a
SQLite file never loads SQLAlchemy at all).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilelens.errors import LocationError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["URL", "parse_url"]


def parse_url(text: str) -> URL:
    """``text`` as a SQLAlchemy URL; :class:`LocationError` when it cannot be one."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(text)
    except (ArgumentError, ValueError) as exc:  # ValueError: e.g. a non-numeric port
        raise LocationError(f"not a database URL: {text!r} ({exc})") from None
