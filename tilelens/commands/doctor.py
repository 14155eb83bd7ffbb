"""``tilelens doctor``: what this installation can do, and what a recording here would use."""

from __future__ import annotations

import typer
from rich.text import Text

from tilelens import api
from tilelens.commands.common import JSON_OPTION, console, print_json, state
from tilelens.commands.escape import escape

HELP = (
    "Show the versions TileLens runs with, the history commands here would use, which optional extras are "
    "installed, and whether compiled recordings read tensor metadata with the native accessor or in Python, "
    "and why.\n\n"
    "Examples:\n\n"
    "  tilelens doctor\n\n"
    "  tilelens doctor --json\n"
)


def register(app: typer.Typer) -> None:
    app.command("doctor", help=HELP)(doctor)


def doctor(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    st = state(ctx)
    env = api.describe_environment(st.db, st.blobs)
    if as_json:
        print_json(env.as_dict())
        return
    out = console()
    out.print(Text(escape(", ".join(f"{k} {v}" for k, v in env.versions.items()))))
    where = env.history["db"] + ("" if env.history.get("exists", True) else " (not created yet)")
    out.print(Text(escape(f"history: {where}; blobs in {env.history['blobs']}")))
    extras = [f"{name} {'yes' if ok else 'no'}" for name, ok in env.extras.items()]
    out.print(Text(f"extras: {', '.join(extras)} (pip install 'tilelens[NAME]')"))
    out.print(Text(escape(f"compiled recordings: {env.native}")))
    out.print(
        Text(
            escape(
                f"C++ compiler: {env.compiler or 'none found'}; CUDA device: {'yes' if env.cuda else 'no'}"
            )
        )
    )
