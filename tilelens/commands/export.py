"""``tilelens export ID``: a launch's access trace as one flat table, one row per lane; ``tilelens export
--dataset DIR``: the history's launches, arguments and trace lanes as a Hive-partitioned Parquet dataset."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import print_json, state
from tilelens.errors import UsageError

HELP = (
    "Write a launch's access trace as a flat table with one row per lane: launch_id, pid_x, pid_y, "
    "pid_z, event, op, arg, arg_name, line, lane, offset (in elements of the argument), active (the "
    "mask) and oob. Read it with pandas, polars or DuckDB.\n\n"
    "With --dataset DIR, the whole history (or the runs given with --run) instead: DIR/launches, "
    "DIR/arguments and DIR/trace_lanes, each partitioned Hive style by kernel and UTC day "
    "(folders kernel=NAME/day=DATE), which DuckDB, Polars and Spark read as they are "
    "(docs/sql.md, 'A dataset for other engines'). DIR must be new or empty (--force replaces it); it "
    "appears whole or not at all.\n\n"
    "Examples:\n\n"
    "  tilelens export 42 -o launch42.parquet\n\n"
    "  tilelens export 42 --format csv -o launch42.csv\n\n"
    "  tilelens export 42 --format csv -o - | head      # - is standard output\n\n"
    "  duckdb -c \"SELECT line, count(*) FROM 'launch42.parquet' WHERE active GROUP BY line\"\n\n"
    "  tilelens export --dataset lens-data --run 3 --run 4\n\n"
    "  duckdb -c \"SELECT kernel, count(*) FROM read_parquet('lens-data/trace_lanes/**/*.parquet', "
    'hive_partitioning=true) WHERE oob GROUP BY kernel"\n'
)


STDOUT = "-"  # as tilelens.store.files.outfile names standard output
EXIT_SIGPIPE = 141  # what a shell reports for a program that a closed pipe stopped


def register(app: typer.Typer) -> None:
    app.command("export", help=HELP)(export)


def export(
    ctx: typer.Context,
    launch_id: int | None = typer.Argument(
        None, metavar="[ID]", help="Launch id, as `tilelens ls` lists it (or --dataset)."
    ),
    fmt: str | None = typer.Option(
        None, "--format", "-f", metavar="FORMAT", help="parquet (the default) or csv."
    ),
    output: str | None = typer.Option(
        None,
        "--output",
        "-o",
        metavar="PATH",
        help="File to write (default: launch-ID.FORMAT); - writes to standard output. A regular file is "
        "replaced atomically; a FIFO, a device or a symlink to one is written through, never replaced.",
    ),
    dataset: str | None = typer.Option(
        None, "--dataset", metavar="DIR", help="Write the history as a Parquet dataset in DIR instead of ID."
    ),
    runs: list[int] | None = typer.Option(  # noqa: B008 - typer reads the default
        None, "--run", metavar="N", help="With --dataset: only this run (repeatable; default: every run)."
    ),
    force: bool = typer.Option(False, "--force", help="With --dataset: replace DIR when it is not empty."),
    as_json: bool = typer.Option(False, "--json", help="With --dataset: print what was written as JSON."),
) -> None:
    if dataset is not None:
        if launch_id is not None:
            raise UsageError("give a launch ID or --dataset DIR, not both")
        if fmt is not None or output is not None:
            raise UsageError("--dataset writes Parquet into DIR; --format and -o are for one launch ID")
        return _dataset(ctx, dataset, runs, force, as_json)
    if launch_id is None:
        raise UsageError("give a launch ID to export, or --dataset DIR for the history")
    extra = [name for name, given in (("--run", runs), ("--force", force), ("--json", as_json)) if given]
    if extra:
        verb = "goes" if len(extra) == 1 else "go"
        raise UsageError(f"{', '.join(extra)} {verb} with --dataset DIR, not with a launch ID")
    fmt = "parquet" if fmt is None else fmt
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


def _dataset(ctx: typer.Context, folder: str, runs: list[int] | None, force: bool, as_json: bool) -> None:
    if not folder:
        raise UsageError("--dataset needs a folder name")
    st = state(ctx)
    with api.open_query(st.db, st.blobs) as q:
        result = q.export_dataset(folder, runs=runs or None, force=force)
    if as_json:
        print_json(result.as_dict())
    rows = result.rows
    render.err().print(
        render.text(
            f"wrote {render.counted(rows['launches'], 'launch', 'launches')}, "
            f"{render.counted(rows['arguments'], 'argument')} and {render.counted(rows['trace_lanes'], 'lane')} "
            f"({render.counted(result.kernels, 'kernel')}, {render.counted(result.partitions, 'partition')}) "
            f"to {result.path}"
        )
    )
