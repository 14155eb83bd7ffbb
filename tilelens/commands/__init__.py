"""Subcommands of the ``tilelens`` CLI, one module each.

A command module defines ``register(app)`` and is listed in :data:`COMMAND_MODULES`; ``tilelens.cli`` calls
every ``register`` at import. Adding ``record``, ``ls``, ``show``, ``sql``, ``replay`` or ``export`` means adding
a module and a line here, without touching the global options or the error handling in ``tilelens.cli``.
"""

from __future__ import annotations

import importlib

import typer

COMMAND_MODULES: tuple[str, ...] = (
    "tilelens.commands.record",
    "tilelens.commands.ls",
    "tilelens.commands.show",
    "tilelens.commands.sql",
    "tilelens.commands.export",
    "tilelens.commands.db",
    "tilelens.commands.replay",
    "tilelens.commands.trace",
    "tilelens.commands.check",
    "tilelens.commands.coverage",
    "tilelens.commands.repro",
    "tilelens.commands.gc",
    "tilelens.commands.serve",
    "tilelens.commands.report",
    "tilelens.commands.diff",
    "tilelens.commands.tables",
    "tilelens.commands.doctor",
)


def register_all(app: typer.Typer) -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)
