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

import difflib
import functools
import inspect
import re
import sys
import traceback
from collections.abc import Callable
from functools import lru_cache
from typing import Annotated, Any

import typer

from tilelens.commands import register_all
from tilelens.commands.common import CliState
from tilelens.commands.escape import escape
from tilelens.errors import SchemaBehindError, TileLensError, ViewsMissingError

app = typer.Typer(
    name="tilelens",
    help="TileLens: record/replay trace database for Triton kernels.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help says [tool.tilelens] and means it: no rich markup
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


def _with_global_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` taking ``--db``/``--blobs``/``--debug`` too, where it does not declare them itself.

    Typer reads a command's options from its signature, so the wrapper's ``__signature__`` is ``fn``'s plus
    these three; the values given go to the :class:`CliState` the callback filled from the options before the
    command (given after it, they win). Only typer's public API is used, so any typer from 0.12 on works.
    """
    signature = inspect.signature(fn, eval_str=True)
    params = list(signature.parameters.values())
    contexts = [p.name for p in params if p.annotation is typer.Context]
    ctx_name = contexts[0] if contexts else "_tilelens_ctx"
    if not contexts:
        params.insert(
            0, inspect.Parameter(ctx_name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
        )
    late = [name for name in _GLOBAL_OPTIONS if name not in signature.parameters]
    params += [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=_GLOBAL_OPTIONS[name], default=default
        )
        for name, default in ((name, False if name == "debug" else None) for name in late)
    ]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        ctx = kwargs[ctx_name] if contexts else kwargs.pop(ctx_name)
        given = {name: kwargs.pop(name) for name in late}
        st = ctx.find_object(CliState)
        if st is not None:
            st.given_after_the_command(**given)
        return fn(*args, **kwargs)

    command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return command


_GLOBAL_OPTIONS: dict[str, Any] = {
    "db": Annotated[str | None, typer.Option("--db", metavar="URL", help=DB_HELP)],
    "blobs": Annotated[str | None, typer.Option("--blobs", metavar="DIR", help=BLOBS_HELP)],
    "debug": Annotated[bool, typer.Option("--debug", help=DEBUG_HELP)],
}


def _examples_as_written(text: str) -> str:
    """``text`` with its "Examples:" lines one block click prints as written (``\\b``): not rewrapped at
    the terminal's width, indented alike in every command."""
    head, found, tail = text.partition("Examples:")
    if not found:
        return text
    lines = [line.strip() for line in tail.strip().splitlines() if line.strip()]
    return f"{head}Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)


def _give_global_options(typer_app: typer.Typer) -> None:
    """Every command of ``typer_app`` and of its sub-apps accepts the global options after its name."""
    for info in typer_app.registered_commands:
        if info.callback is not None and not getattr(info.callback, "_tilelens_global", False):
            info.help = _examples_as_written(info.help or inspect.getdoc(info.callback) or "")
            info.callback = _with_global_options(info.callback)
            info.callback._tilelens_global = True  # type: ignore[attr-defined]
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _give_global_options(group.typer_instance)


# Options whose value may be left out (command, option): given alone, the option's value is "". Typer has no
# public way to say so, so main() puts the "" in the arguments itself, before any parsing.
OPTIONAL_VALUES = {"ls": ("--test",)}
_VALUED_GLOBALS = ("--db", "--blobs")


def _with_optional_values(argv: list[str]) -> list[str]:
    """``argv`` with "" after each option of :data:`OPTIONAL_VALUES` given without a value (last, or before
    another option): ``tilelens ls --test`` is ``tilelens ls --test ""``."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):  # the global options before the command
        i += 2 if argv[i] in _VALUED_GLOBALS else 1
    if i >= len(argv) or argv[i] not in OPTIONAL_VALUES:
        return argv
    out, options = argv[: i + 1], OPTIONAL_VALUES[argv[i]]
    rest = argv[i + 1 :]
    for j, arg in enumerate(rest):
        out.append(arg)
        if arg == "--":
            out.extend(rest[j + 1 :])
            break
        if arg in options and (j + 1 == len(rest) or rest[j + 1].startswith("-")):
            out.append("")
    return out


@lru_cache(maxsize=1)
def command() -> Any:
    """The command object behind ``app`` (click's, or the one newer typers carry), global options on each."""
    _give_global_options(app)
    return typer.main.get_command(app)


def _usage_error_class() -> type[Exception]:
    """What a usage error (unknown option, bad value) raises: typer's own class from 0.26 on, click's before."""
    own = getattr(typer, "TyperException", None)
    if isinstance(own, type):
        return own
    import click

    return click.ClickException


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


def _usage_line(exc: Exception) -> str:
    text = escape(" ".join(str(getattr(exc, "format_message", lambda: exc)()).split()))
    text = re.sub(
        r"(Did you mean [^?]*\?)( \1)+", r"\1", text
    )  # typer < 0.26 with click >= 8.2 says it twice
    ctx = getattr(exc, "ctx", None)
    unknown = re.fullmatch(r"No such command '(.*)'\.", text)
    if unknown and ctx is not None and hasattr(ctx.command, "list_commands"):  # click < 8.2 suggests none
        close = difflib.get_close_matches(unknown[1], ctx.command.list_commands(ctx), n=1)
        text += f" Did you mean '{close[0]}'?" if close else ""
    if ctx is not None:
        text += f" (see {ctx.command_path} --help)"
    return f"tilelens: error: {text}"


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code instead of exiting so tests can call it."""
    st = CliState()
    usage_error = _usage_error_class()
    try:
        args = _with_optional_values(sys.argv[1:] if argv is None else list(argv))
        result = command().main(args=args, prog_name="tilelens", obj=st, standalone_mode=False)
    except SystemExit as exc:  # a broken pipe (click exits 1), or a command's own sys.exit
        from tilelens.runner import exit_status

        return exit_status(exc.code)
    except usage_error as exc:  # an unknown option or command, a bad or missing value
        if type(exc).__name__ != "NoArgsIsHelpError":  # else typer has printed the help already
            print(_usage_line(exc), file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except typer.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click < 8.2 turns Ctrl-C into Abort: still Ctrl-C
            print("tilelens: interrupted", file=sys.stderr)
            return 130
        print("tilelens: error: aborted", file=sys.stderr)
        return 1
    except TileLensError as exc:
        if st.debug:
            traceback.print_exc()
        print(error_line(exc), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # Ctrl-C: what was committed stays; one line and the shell's 130, no traceback
        if st.debug:
            traceback.print_exc()
        print("tilelens: interrupted", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
