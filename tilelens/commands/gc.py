"""``tilelens gc``: remove leftovers (temp files, unreferenced blobs) and, on request, old or untagged runs."""

from __future__ import annotations

import typer

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import JSON_OPTION, print_json, state

HELP = (
    "Remove what the history no longer needs and say what was freed.\n\n"
    "Always: temp files left by killed writers and blob files no row references, once older than the "
    "grace period. With --older-than and/or --untagged: the finished runs that match (both must hold "
    "when both are given), with their launches, arguments, autotune events and replays, and then the "
    "blobs nothing references any more. Runs still recording are never removed. Safe while other "
    "processes record: files younger than --grace (default 1h) are kept.\n\n"
    "Examples:\n\n"
    "  tilelens gc\n\n"
    "  tilelens gc --older-than 30d --dry-run\n\n"
    "  tilelens gc --untagged --older-than 2026-01-31\n"
)


def register(app: typer.Typer) -> None:
    app.command("gc", help=HELP)(gc)


def gc(
    ctx: typer.Context,
    older_than: str | None = typer.Option(
        None, "--older-than", metavar="AGE|DATE", help="Runs started before: 30d, 12h, 2w or 2026-01-31."
    ),
    untagged: bool = typer.Option(False, "--untagged", help="Runs recorded without a tag."),
    dry_run: bool = typer.Option(False, "--dry-run", "-n", help="Report what would go; remove nothing."),
    grace: str = typer.Option(
        "1h",
        "--grace",
        metavar="DURATION",
        help="Keep unreferenced files younger than this (0: no one records).",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    cutoff = api.gc_cutoff(older_than) if older_than is not None else None  # bad input: one line, exit 2
    grace_period = api.gc_duration(grace)
    location = state(ctx).location()
    # A dry run only reads: the history is opened read-only (nothing repaired, nothing checkpointed; a
    # history on read-only media can be asked), and must exist.
    opened = (
        api.open_existing_history(location=location, read_only=True)
        if dry_run
        else api.open_history(location=location)
    )
    with opened as history:
        report = api.collect_garbage(
            history, older_than=cutoff, untagged=untagged, dry_run=dry_run, grace=grace_period
        )
    if as_json:
        print_json(report.as_dict())
        return
    counts = [
        _count(report.runs, "run"),
        _count(report.launches, "launch", "launches"),
        _count(report.blob_rows, "blob row"),
        _count(report.blob_files, "blob file"),
        _count(report.tmp_files, "temp file"),
    ]
    verb, freed = ("would remove", "would be freed") if dry_run else ("removed", "freed")
    line = f"{verb} {', '.join(counts)}: {render.size(report.bytes_freed)} {freed}"
    render.out().print(render.text(line))
    if report.young_files:
        render.err().print(
            render.text(
                f"kept {_count(report.young_files, 'unreferenced file')} younger than --grace {grace}"
            ),
            style="dim",
        )


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"
