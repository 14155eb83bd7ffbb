"""``tilelens report --html DIR``: a run as a folder of static HTML, for a CI artifact (read-only)."""

from __future__ import annotations

from pathlib import Path

import typer

from tilelens import api
from tilelens.commands.common import JSON_OPTION, console, print_json, state
from tilelens.commands.escape import escape

HELP = (
    "Write a run of the history as static HTML into DIR: index.html (the run's command, status, times and "
    "counts, and a table of its launches with kernel, grid, config, out-of-bounds lanes and replay outcome) "
    "and a page per launch (arguments, accesses, out-of-bounds events with their source lines, heatmaps, "
    "replays, the kernel source with those lines marked), up to --max-pages of them. Relative links only, no "
    "script, nothing loaded from elsewhere: the folder reads the same opened from disk, as a CI artifact. "
    "The history is only read.\n\n"
    "Examples:\n\n"
    "  tilelens report --html report\n\n"
    "  tilelens report --html out/run3 --run 3 --max-pages 200 --force\n"
)


def register(app: typer.Typer) -> None:
    app.command("report", help=HELP)(report)


def report(
    ctx: typer.Context,
    html: Path = typer.Option(  # noqa: B008 - typer reads the default
        ..., "--html", metavar="DIR", help="The folder to write (index.html and launch-ID.html)."
    ),
    run: int | None = typer.Option(
        None, "--run", metavar="N", help="The run to report (default: the newest)."
    ),
    max_pages: int = typer.Option(
        50,  # tilelens.reporters.report.MAX_PAGES
        "--max-pages",
        metavar="N",
        min=0,
        help="At most N launches get a page of their own (those with errors, out-of-bounds lanes or a "
        "mismatched replay first).",
    ),
    force: bool = typer.Option(False, "--force", help="Replace DIR when it exists and is not empty."),
    as_json: bool = JSON_OPTION,
) -> None:
    with api.open_query(location=state(ctx).location()) as q:
        written = api.write_report(q, html, run=run, max_pages=max_pages, force=force)
    if as_json:
        print_json(written.as_dict())
        return
    pages = len(written.pages)
    console().print(
        escape(
            f"wrote {written.path / 'index.html'}: run {written.run_id}, {written.launches} launches, "
            f"{pages} launch {'page' if pages == 1 else 'pages'}"
        )
    )
