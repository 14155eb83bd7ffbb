"""``tilelens repro``: a standalone folder that reproduces one recorded launch without TileLens."""

from __future__ import annotations

from pathlib import Path

import typer

from tilelens import api
from tilelens.commands.common import JSON_OPTION, console, print_json, state
from tilelens.commands.escape import escape

HELP = (
    "Write a folder that reproduces launch ID without TileLens: repro.py, repro.json and the launch's "
    "tensors as .npy files. `python DIR/repro.py [--device cuda]` needs only torch, Triton and numpy: it "
    "rebuilds the arguments, launches the kernel with the recorded grid, config and options, and prints "
    "match (exit 0) or the first difference (exit 1).\n\n"
    "Examples:\n\n"
    "  tilelens repro 42\n\n"
    "  tilelens repro 42 -o /tmp/launch42 --force\n\n"
    "  python repro-42/repro.py --device cuda\n"
)


def register(app: typer.Typer) -> None:
    app.command("repro", help=HELP)(repro)


def repro(
    ctx: typer.Context,
    launch_id: int = typer.Argument(
        ..., metavar="ID", help="The launch to reproduce (tilelens ls lists them)."
    ),
    output: Path | None = typer.Option(  # noqa: B008 - typer reads the default
        None, "--output", "-o", metavar="DIR", help="Default: ./repro-ID."
    ),
    force: bool = typer.Option(False, "--force", help="Replace DIR when it exists and is not empty."),
    as_json: bool = JSON_OPTION,
) -> None:
    folder = output if output is not None else Path(f"repro-{launch_id}")
    with api.open_existing_history(location=state(ctx).location(), read_only=True) as history:
        written = api.write_repro(history, launch_id, folder, force=force)
    if as_json:
        print_json({"path": str(written.path), "launch": written.launch_id, "files": list(written.files)})
        return
    how = (
        "its recorded bundle"
        if written.kernel_from == "bundle"
        else "its module (the record keeps no bundle)"
    )
    out = console()
    out.print(escape(f"wrote {written.path}: {len(written.files)} files; the kernel comes from {how}"))
    out.print(escape(f"run: python {written.path / 'repro.py'} [--device cuda]"))
