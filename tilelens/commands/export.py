"""``tilelens export ID``: a launch's access trace as one flat table, one row per lane."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import state
from tilelens.errors import UsageError

HELP = (
    "Write a launch's access trace as a flat table with one row per lane: launch_id, pid_x, pid_y, "
    "pid_z, event, op, arg, arg_name, line, lane, offset (in elements of the argument), active (the "
    "mask) and oob. Read it with pandas, polars or DuckDB.\n\n"
    "Examples:\n\n"
    "  tilelens export 42 -o launch42.parquet\n\n"
    "  tilelens export 42 --format csv -o launch42.csv\n\n"
    "  tilelens export 42 --format csv -o - | head      # - is standard output\n\n"
    "  duckdb -c \"SELECT line, count(*) FROM 'launch42.parquet' WHERE active GROUP BY line\"\n"
)


STDOUT = "-"  # as tilelens.store.files.outfile names standard output
EXIT_SIGPIPE = 141  # what a shell reports for a program that a closed pipe stopped


def register(app: typer.Typer) -> None:
    app.command("export", help=HELP)(export)


def export(
    ctx: typer.Context,
    launch_id: int = typer.Argument(..., metavar="ID", help="Launch id, as `tilelens ls` lists it."),
    fmt: str = typer.Option("parquet", "--format", "-f", metavar="FORMAT", help="parquet or csv."),
    output: str | None = typer.Option(
        None,
        "--output",
        "-o",
        metavar="PATH",
        help="File to write (default: launch-ID.FORMAT); - writes to standard output. A regular file is "
        "replaced atomically; a FIFO, a device or a symlink to one is written through, never replaced.",
    ),
) -> None:
    if fmt not in api.EXPORT_FORMATS:
        raise typer.BadParameter(f"must be one of {', '.join(api.EXPORT_FORMATS)}", param_hint="--format")
    path = Path(output if output is not None else f"launch-{launch_id}.{fmt}")
    if output == STDOUT:
        if fmt == "parquet" and sys.stdout.isatty():
            raise UsageError(
                "refusing to write Parquet to a terminal; redirect standard output or use --format csv"
            )
    # os.path.isdir, not Path.is_dir: it answers False for a path the system refuses (a name too long),
    # and the export then says why it cannot write there.
    elif os.path.isdir(path):
        raise UsageError(f"{path} is a directory; give a file name with -o")
    elif not os.path.isdir(path.parent):
        raise UsageError(f"cannot write {path}: folder {path.parent} does not exist")
    st = state(ctx)
    with api.open_query(st.db, st.blobs) as q:
        try:
            result = q.export(launch_id, STDOUT if output == STDOUT else path, fmt)  # type: ignore[arg-type]
        except BrokenPipeError:
            raise typer.Exit(EXIT_SIGPIPE) from None  # `| head` had enough: quiet, as for any Unix tool
    noun = "lane" if result.rows == 1 else "lanes"
    render.err().print(
        render.text(
            f"wrote {result.rows:,} {noun} of launch {launch_id} to "
            f"{'standard output' if output == STDOUT else result.path} ({result.format})"
        )
    )
