"""The ``tilelens`` command line: global options, command registration, and the error policy.

Expected failures (a location that is not a history, a newer schema, a bad URL) print one line on stderr and
exit with 2, the code for usage and input errors; ``--debug`` adds the traceback. Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import sys
import traceback

import typer

from tilelens.commands import register_all
from tilelens.commands.common import CliState
from tilelens.commands.escape import escape
from tilelens.config import LocationError
from tilelens.store.errors import HistoryError

EXIT_USAGE = 2

app = typer.Typer(
    name="tilelens",
    help="TileLens: record/replay trace database for Triton kernels.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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
    db: str | None = typer.Option(
        None, "--db", metavar="URL", help="History database: SQLAlchemy URL or file path (env TILELENS_DB)."
    ),
    blobs: str | None = typer.Option(
        None,
        "--blobs",
        metavar="DIR",
        help="Blob folder (default: blobs/ beside a SQLite file; env TILELENS_BLOBS).",
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors."),
    _version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    st = ctx.ensure_object(CliState)
    st.db, st.blobs, st.debug = db, blobs, debug


register_all(app)


def _one_line(exc: BaseException) -> str:
    text = escape(" ".join(str(exc).split())) or type(exc).__name__
    return text if isinstance(exc, (HistoryError, LocationError)) else f"{type(exc).__name__}: {text}"


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code instead of exiting so tests can call it."""
    st = CliState()
    try:
        # Standalone mode keeps Typer's own handling of usage errors (exit 2) and --help; only errors raised
        # by the commands themselves arrive here.
        app(args=argv, prog_name="tilelens", obj=st)
    except SystemExit as exc:
        from tilelens.runner import exit_status

        return exit_status(exc.code)
    except Exception as exc:
        if not _expected(exc):
            raise
        if st.debug:
            traceback.print_exc()
        print(f"tilelens: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _expected(exc: BaseException) -> bool:
    sa_exc = sys.modules.get("sqlalchemy.exc")  # imported by whatever raised it, if anything did
    types = (HistoryError, LocationError, OSError) + ((sa_exc.SQLAlchemyError,) if sa_exc else ())
    return isinstance(exc, types)


if __name__ == "__main__":
    sys.exit(main())
