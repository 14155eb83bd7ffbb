"""What every command shares: the global options, the history they name, and output helpers.

Commands stay thin: they take a :class:`CliState` from the Typer context, call the Python API
(:mod:`tilelens.api`, never the layers below it), and render. Errors are not handled here: a command fails by
raising a ``TileLensError``, which ``tilelens.cli.main`` prints as one line and exits with its code.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from tilelens import api
from tilelens.config import Location, resolve_location

if TYPE_CHECKING:
    from tilelens.api import History


@dataclass
class CliState:
    db: str | None = None
    blobs: str | None = None
    debug: bool = False

    def given_after_the_command(
        self, db: str | None = None, blobs: str | None = None, debug: bool = False
    ) -> None:
        """Options given after the command name win over those before it (each only where given)."""
        self.db = db if db is not None else self.db
        self.blobs = blobs if blobs is not None else self.blobs
        self.debug = debug or self.debug

    def location(self) -> Location:
        return resolve_location(self.db, self.blobs)

    def open_history(self) -> History:
        return api.open_history(location=self.location())


def state(ctx: typer.Context) -> CliState:
    obj = ctx.find_object(CliState)
    if obj is None:  # a command invoked without the root callback (tests calling a sub-app directly)
        obj = ctx.ensure_object(CliState)
    return obj


def console() -> Console:
    # Resolved per call so that tests capturing sys.stdout see the output.
    return Console(file=sys.stdout, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON instead of a table.")
