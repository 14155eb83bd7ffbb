"""The ``tilelens`` command line: global options, command registration, and the error policy.

Every command fails one way: it raises a :class:`~tilelens.errors.TileLensError` (the API's own errors, or
``UsageError`` for a bad option value). :func:`main` prints it as one line, ``tilelens: error: MESSAGE``, adds
the command-line hint where one applies (lower layers speak of no flags), and exits with the error's
``exit_code`` (2 for usage and input errors). Typer's own usage errors (an unknown option, a missing argument)
end the same way, on one line with exit 2. ``--debug`` adds the traceback. Any other exception is a bug and
keeps its traceback.

The global options ``--db``, ``--blobs`` and ``--debug`` are accepted before the command or after it
(``tilelens db upgrade --db X``, ``tilelens replay 1 --blobs D``); given twice, the later one wins. After
``record SCRIPT`` everything belongs to the program.
"""

from __future__ import annotations

import sys
import traceback
from functools import lru_cache
from typing import Any

import click
import typer

from tilelens.commands import register_all
from tilelens.commands.common import CliState
from tilelens.commands.escape import escape
from tilelens.errors import SchemaBehindError, TileLensError, UnsupportedError, ViewsMissingError

app = typer.Typer(
    name="tilelens",
    help="TileLens: record/replay trace database for Triton kernels.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

DB_HELP = "History database: SQLAlchemy URL or file path (env TILELENS_DB)."
BLOBS_HELP = "Blob folder (default: blobs/ beside a SQLite file; env TILELENS_BLOBS)."
DEBUG_HELP = "Show tracebacks for errors."


def version() -> str:
    from importlib import metadata  # 20 ms of every start otherwise

    try:
        return metadata.version("tilelens")
    except metadata.PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tilelens {version()}")
        raise typer.Exit()


@app.callback()
def _global_options(
    ctx: typer.Context,
    db: str | None = typer.Option(None, "--db", metavar="URL", help=DB_HELP),
    blobs: str | None = typer.Option(None, "--blobs", metavar="DIR", help=BLOBS_HELP),
    debug: bool = typer.Option(False, "--debug", help=DEBUG_HELP),
    _version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    st = ctx.ensure_object(CliState)
    # Options given after the command are parsed later and overwrite these (see _late_global).
    st.db, st.blobs, st.debug = db, blobs, debug


register_all(app)


def _late_global(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """A global option given after the command name: it goes where the one before the command would."""
    if value is None or value is False:
        return
    st = ctx.find_object(CliState)
    if st is not None and param.name is not None:
        setattr(st, param.name, value)


def _global_options_after(group: click.Group) -> None:
    """Give every command (and group) below ``group`` the global options, unless it declares them itself."""
    for command in group.commands.values():
        taken = {opt for param in command.params for opt in getattr(param, "opts", ())}
        late = [
            click.Option(["--db", "db"], metavar="URL", help=DB_HELP),
            click.Option(["--blobs", "blobs"], metavar="DIR", help=BLOBS_HELP),
            click.Option(["--debug", "debug"], is_flag=True, default=False, help=DEBUG_HELP),
        ]
        for option in late:
            if not taken.intersection(option.opts):
                option.expose_value = False
                option.callback = _late_global
                command.params.append(option)
        if isinstance(command, click.Group):
            _global_options_after(command)


@lru_cache(maxsize=1)
def command() -> click.Group:
    """The click command behind ``app``, with the global options on every command."""
    group = typer.main.get_command(app)
    if not isinstance(group, click.Group):  # typer >= 0.26 carries its own command classes, not click's
        raise UnsupportedError(
            f"this TileLens needs typer < 0.26 (found {getattr(typer, '__version__', '?')}, whose commands are "
            "not click's): pip install 'typer>=0.12,<0.26'"
        )
    _global_options_after(group)
    return group


# Hints the command line adds to the neutral messages of lower layers: what to type to get further.
_HINTS: dict[type[TileLensError], str] = {
    ViewsMissingError: "`tilelens db upgrade` adds them",
    SchemaBehindError: "`tilelens db upgrade` upgrades it",
}


def error_line(exc: TileLensError) -> str:
    """``tilelens: error: MESSAGE`` on one line, with the command-line hint for its kind of error, if any."""
    text = escape(" ".join(str(exc).split())) or type(exc).__name__
    hint = next((h for cls, h in _HINTS.items() if isinstance(exc, cls)), None)
    return f"tilelens: error: {text}" + (f"; {hint}" if hint else "")


def _usage_line(exc: click.ClickException) -> str:
    text = escape(" ".join(exc.format_message().split()))
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        text += f" (see {ctx.command_path} --help)"
    return f"tilelens: error: {text}"


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code instead of exiting so tests can call it."""
    st = CliState()
    try:
        result = command().main(args=argv, prog_name="tilelens", obj=st, standalone_mode=False)
    except SystemExit as exc:  # a broken pipe (click exits 1), or a command's own sys.exit
        from tilelens.runner import exit_status

        return exit_status(exc.code)
    except click.exceptions.NoArgsIsHelpError as exc:  # Typer has printed the help already
        return exc.exit_code
    except click.ClickException as exc:  # usage: an unknown option or command, a bad or missing value
        print(_usage_line(exc), file=sys.stderr)
        return exc.exit_code
    except click.Abort:
        print("tilelens: error: aborted", file=sys.stderr)
        return 1
    except TileLensError as exc:
        if st.debug:
            traceback.print_exc()
        print(error_line(exc), file=sys.stderr)
        return exc.exit_code
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
