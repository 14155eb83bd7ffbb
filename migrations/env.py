"""Alembic environment for TileLens histories.

Two ways in: TileLens itself passes an open connection (``config.attributes["connection"]``) already inside
the write transaction it manages; the ``alembic`` command line passes nothing and gets the history that
``tilelens`` would use (``sqlalchemy.url`` if set, else TILELENS_DB / ./.tilelens), through the same engine
factory so SQLite gets the same pragmas.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from tilelens.config import resolve_location
from tilelens.store.sql.database import create_history_engine
from tilelens.store.sql.models import Base

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite alters tables by copy-and-rename; batch mode makes migrations written once work on both.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_migrations_offline() -> None:
    url = config.get_main_option("sqlalchemy.url") or resolve_location().db_url
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = config.get_main_option("sqlalchemy.url") or resolve_location().db_url
    engine = create_history_engine(url)
    try:
        with engine.connect() as conn:
            _configure(conn)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
