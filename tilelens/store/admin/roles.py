"""Least privilege for readers of a PostgreSQL history: a role that may SELECT TileLens's tables and views.

``tilelens sql``, ``ls``, ``show``, ``serve`` and ``replay`` only read. Connected as a superuser they read
inside read-only transactions as ``pg_read_all_data``, behind the parser gate of
:mod:`tilelens.store.sql.pgparse`; connected as the reader role made here (a URL that names it:
``postgresql+psycopg://tilelens_reader@host/db``) the server itself refuses everything but reading the
history: no write, no server file, no other database object.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from sqlalchemy import text

from tilelens.errors import UsageError

if TYPE_CHECKING:
    from tilelens.store.write.history import History

_ROLE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def check_role(role: str) -> str:
    if not _ROLE_RE.match(role):
        raise UsageError(
            f"role name {role!r} is not a plain SQL identifier (letters, digits, _ and $; 63 at most)"
        )
    return role


def grant_reader_sql(history: History, role: str) -> list[str]:
    """The statements that make ``role`` a reader of ``history`` (a PostgreSQL one): it may log in, connect to
    the database, use the history's schema and SELECT its tables and views, and nothing else is granted."""
    check_role(role)
    if history.engine.dialect.name != "postgresql":
        raise UsageError("a reader role is for PostgreSQL histories: a SQLite file is read-only to whoever "
                         "may only read the file")  # fmt: skip
    with history.engine.connect() as conn:
        database, schema = conn.execute(text("SELECT current_database(), current_schema()")).one()
        relations = sorted(
            r[0]
            for r in conn.execute(
                text(
                    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm')"
                )
            )
        )
    who = _quote(role)
    tables = ", ".join(f"{_quote(schema)}.{_quote(name)}" for name in relations)
    return [
        f"CREATE ROLE {who} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT",
        f"GRANT CONNECT ON DATABASE {_quote(database)} TO {who}",
        f"GRANT USAGE ON SCHEMA {_quote(schema)} TO {who}",
        f"GRANT SELECT ON {tables} TO {who}",
        # tables a later schema upgrade adds, when the same owner runs it
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {_quote(schema)} GRANT SELECT ON TABLES TO {who}",
    ]


def grant_reader(history: History, role: str) -> list[str]:
    """Run :func:`grant_reader_sql` (the role is created only when missing); returns what was run."""
    statements = grant_reader_sql(history, role)
    done: list[str] = []
    with history.engine.begin() as conn:
        exists = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first()
        for statement in statements:
            if exists and statement.startswith("CREATE ROLE"):
                continue
            conn.execute(text(statement))
            done.append(statement)
    return done
