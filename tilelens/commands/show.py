"""``tilelens show ID``: one launch in full, optionally beside its kernel's source."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import typer

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import JSON_OPTION, print_json, state
from tilelens.commands.escape import escape, escape_lines
from tilelens.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from tilelens.api import AccessStats, LaunchDetail

HELP = (
    "Show one launch: kernel, grid, config, arguments, what each argument's lanes did (loads, "
    "stores, atomics, lanes, bytes, distinct elements, out-of-bounds lanes) and the first "
    "out-of-bounds events.\n\n"
    "--source prints the kernel's source with the lanes each line loaded and stored in the margin; "
    "a line with out-of-bounds lanes is red and starts with '!'.\n\n"
    "Examples:\n\n"
    "  tilelens show 42\n\n"
    "  tilelens show 42 --source\n\n"
    "  tilelens show --last-oob --source\n\n"
    "  tilelens show 42 --json | jq '.args[] | {name, access}'\n\n"
    "  tilelens show 42 --heatmap launch42.png --heatmap-by program\n"
)


def register(app: typer.Typer) -> None:
    app.command("show", help=HELP)(show)


def show(
    ctx: typer.Context,
    launch_id: int | None = typer.Argument(
        None, metavar="ID", help="Launch id, as `tilelens ls` lists it (or --last-oob)."
    ),
    last_oob: bool = typer.Option(
        False, "--last-oob", help="Instead of ID: the newest launch with out-of-bounds lanes."
    ),
    source: bool = typer.Option(False, "--source", help="Print the kernel source with per-line lane counts."),
    oob_events: int = typer.Option(
        10, "--oob-events", min=0, metavar="N", help="Show at most N out-of-bounds events."
    ),
    as_json: bool = JSON_OPTION,
    heatmap: str | None = typer.Option(
        None,
        "--heatmap",
        metavar="FILE",
        help="Also draw each tensor argument's elements into FILE (.png or .svg).",
    ),
    heatmap_by: str = typer.Option(
        "access",
        "--heatmap-by",
        help="Colour cells by: access (kind), count (accesses per element) or program.",
    ),
    heatmap_width: int | None = typer.Option(
        None, "--heatmap-width", min=1, metavar="N", help="Fold 1-D tensors into rows of N elements."
    ),
) -> None:
    st = state(ctx)
    missing: UsageError | None = None
    if (launch_id is None) == (not last_oob):
        raise UsageError("show takes a launch ID or --last-oob (one of them)")
    with api.open_query(st.db, st.blobs) as q:
        if launch_id is None:
            newest = q.launches(oob=True, limit=1)
            if not newest:
                raise UsageError("no launch of this history went out of bounds")
            launch_id = newest[0].id
        detail = q.launch(launch_id, oob_events=oob_events, source=source)
        if heatmap is not None:  # drawn before anything is printed: a bad file name prints nothing
            maps = api.launch_heatmaps(
                q, launch_id, width=heatmap_width, max_cells=api.max_cells_for(heatmap)
            )
            title = f"launch {launch_id}  {detail.kernel.name}  grid {render.grid(detail.launch.grid)}"
            try:
                api.write_heatmaps(maps, heatmap, title=title, by=heatmap_by)
                render.err().print(escape(f"heatmap written to {heatmap}"), markup=False)
            except ImportError as exc:  # the launch is still shown; the missing extra is named after it
                if (exc.name or "").partition(".")[0] != "matplotlib":
                    raise
                missing = UsageError(
                    f"{heatmap} not written: PNG heatmaps need matplotlib (pip install 'tilelens[heatmap]'; "
                    "or write .svg, which needs nothing)"
                )
    _print(detail, as_json, source)
    if missing is not None:
        raise missing


def _print(detail: LaunchDetail, as_json: bool, source: bool) -> None:
    if as_json:
        print_json(detail.as_dict())
        return
    console = render.out()
    _print_header(console, detail)
    _print_arguments(console, detail)
    _print_oob(console, detail)
    _print_autotune_and_replays(console, detail)
    if source:
        _print_source(console, detail)


def _field(console: Console, name: str, value: str, style: str = "") -> None:
    from rich.text import Text

    line = Text(f"  {name:<11}", style="bold")
    line.append(escape(value), style=style)
    console.print(line)


def _print_header(console: Console, d: LaunchDetail) -> None:
    from rich.text import Text

    launch, kernel = d.launch, d.kernel
    title = Text(f"launch {launch.id}", style="bold")
    title.append(f"  {escape(kernel.name)}", style="bold cyan")
    run = f"  run {d.run['id']}" + (f" (tag {d.run['tag']})" if d.run["tag"] else "") + f", seq {launch.seq}"
    title.append(escape(run))
    console.print(title)
    _field(console, "kernel", f"{kernel.file}:{kernel.def_line}")
    _field(console, "cache key", kernel.cache_key or "-")
    _field(console, "source", f"sha256 {kernel.source_sha256}")
    _field(
        console,
        "started",
        f"{render.local_time(launch.started_at)}, {launch.duration_s:.3f} s, {launch.backend} on {launch.device}",
    )
    _field(console, "grid", render.grid(launch.grid))
    _field(console, "config", render.config(launch.config))
    if launch.tuning_key:
        _field(console, "tuning key", launch.tuning_key)
    if launch.test_nodeid:
        _field(console, "test", launch.test_nodeid)
    if launch.role != "launch":
        _field(console, "role", launch.role)
    _field(console, "status", launch.status, "red" if launch.status != "ok" else "green")
    if launch.error:
        # A multi-line message keeps its lines, each escaped and indented under the first.
        first, *rest = escape_lines(launch.error.rstrip("\n"))
        _field(console, "error", first, "red")
        for line in rest:
            console.print(Text(f"  {'':<11}{line}", style="red"))
    s = d.summary
    if d.trace is not None:
        trace = (
            f"{render.counted(s['events'], 'event')}, {render.counted(s['lanes'], 'lane')} "
            f"({render.count(launch.active_lanes)} active), blob {d.trace['blob'][:12]} "
            f"({render.size(d.trace['bytes'])})"
        )
    elif launch.backend == "compiled":
        trace = f"not recorded (the launch ran compiled); derive it with `tilelens trace {launch.id}`"
    else:
        trace = "not recorded"
    _field(console, "trace", trace)
    if any(a.kind == "tensor" and a.before_blob is None for a in d.args):
        _field(console, "replayable", "no: recorded without tensor snapshots", "yellow")
    if d.trace_error:
        _field(console, "", d.trace_error, "red")
    oob = f"{render.counted(launch.oob_lanes, 'lane')} out of bounds"
    if launch.oob_lanes and launch.oob_load_lanes is not None and launch.oob_store_lanes is not None:
        oob += (
            f" ({render.count(launch.oob_load_lanes)} loaded, {render.count(launch.oob_store_lanes)} stored"
        )
        if launch.dropped_lanes:
            oob += f", {render.count(launch.dropped_lanes)} of them dropped: outside every argument's memory"
        oob += ")"
    _field(console, "oob", oob, "bold red" if launch.oob_lanes else "")
    cross = _cross(d)
    if cross:
        _field(console, "cross", cross, "bold red")


def _cross(d: LaunchDetail) -> str:
    """Out-of-bounds lanes that landed in another argument's view (``config.cross_args``), one clause each."""
    names = {a.position: a.name for a in d.args}
    parts = []
    for entry in (d.launch.config or {}).get("cross_args") or ():
        try:
            src, hit, lanes = (int(v) for v in entry)
        except (TypeError, ValueError):
            continue
        parts.append(
            f"{render.counted(lanes, 'out-of-bounds lane')} of {names.get(src, f'#{src}')}'s accesses "
            f"hit {names.get(hit, f'#{hit}')}'s elements"
        )
    return "; ".join(parts)


def _print_arguments(console: Console, d: LaunchDetail) -> None:
    from rich import box
    from rich.table import Table

    console.print()
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="arguments", title_justify="left")
    for name in ("#", "name", "kind", "dtype", "shape", "strides", "value / change"):
        # Shapes and strides stay on one line; a long value folds at spaces (render.fit).
        table.add_column(
            name, justify="right" if name == "#" else "left", no_wrap=name in ("shape", "strides")
        )
    for a in d.args:
        if a.kind == "tensor":
            value = "written" if a.changed else "unchanged"
            if (
                a.snapshot_elements is not None
            ):  # the other elements are unknown: the launch never touched them
                value += f", snapshot of the {render.count(a.snapshot_elements)} touched elements only"
        else:
            value = repr(a.value) if a.value is not None else "None"
        table.add_row(
            render.cell(a.position),
            render.cell(a.name),
            render.cell(a.kind),
            render.cell(a.dtype or ""),
            render.cell(_dims(a.shape)),
            render.cell(_dims(a.strides)),
            render.cell(value, "yellow" if a.changed else ""),
        )
    render.fit(console, table)
    console.print(table)

    traced = [(a.name, a.access, a.numel) for a in d.args if a.access is not None]
    if d.unattributed is not None:
        traced.append(("(no argument)", d.unattributed, None))
    if not traced:
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="memory access", title_justify="left")
    table.add_column("argument")
    for name in (
        "loads",
        "stores",
        "atomics",
        "lanes",
        "bytes read",
        "bytes written",
        "distinct",
        "oob lanes",
    ):
        table.add_column(name, justify="right", no_wrap=True)  # "24.6 kB" whole; headers fold (render.fit)
    for name, access, numel in traced:
        table.add_row(
            render.cell(name),
            render.cell(render.count(access.loads)),
            render.cell(render.count(access.stores)),
            render.cell(render.count(access.atomics)),
            render.cell(render.count(access.active_lanes)),
            render.cell(render.size(access.bytes_loaded)),
            render.cell(render.size(access.bytes_stored)),
            render.cell(_distinct(access, numel)),
            render.cell(render.count(access.oob_lanes), "bold red" if access.oob_lanes else ""),
        )
    render.fit(console, table)
    console.print(table)


def _dims(values: list[int] | None) -> str:
    return "" if values is None else "[" + ", ".join(str(v) for v in values) + "]"


def _distinct(access: AccessStats, numel: int | None) -> str:
    if access.distinct_elements is None:
        return "-"
    text = render.count(access.distinct_elements)
    return f"{text} of {render.count(numel)}" if numel is not None else text


def _print_oob(console: Console, d: LaunchDetail) -> None:
    from rich.text import Text

    if not d.oob_events:
        return
    console.print()
    shown = len(d.oob_events)
    heading = f"out-of-bounds events (first {shown} of {d.oob_event_count})"
    console.print(Text(heading, style="bold red"))
    sizes = {a.position: a.numel for a in d.args}
    for e in d.oob_events:
        where = e.arg_name if e.arg_name is not None else "no argument"
        line = Text(escape(f"  pid {render.grid(e.pid)}  {e.op} {where}  line {e.line}: "), style="")
        line.append(f"{e.oob_lanes} of {e.active} active lanes outside", style="red")
        if e.offsets is not None and e.arg_name is not None:
            low, high = e.offsets
            line.append(f", element offsets {low}..{high}")
            if sizes.get(e.arg) is not None:
                line.append(escape(f" ({e.arg_name} has {sizes[e.arg]} elements)"))
        fate = _fate(e.op, e.oob_lanes, e.stray_lanes)
        if fate:
            line.append(f"; {fate}", style="red")
        console.print(line)
        if e.source_text is not None:
            console.print(Text(f"      {escape(e.source_text.strip())}", style="dim"))


def _fate(op: str, oob: int, stray: int) -> str:
    """What became of an event's out-of-bounds lanes (see tilelens.core.engine.bounds)."""
    if op == "load":
        return f"{stray} outside every argument's memory, read as 0 or through a safe path" if stray else ""
    if stray == oob:
        return "not written: outside every argument's memory"
    if not stray:
        return "written into memory of the same storage (outside the view)"
    return f"{stray} not written (outside every argument's memory), {oob - stray} written in the same storage"


def _print_autotune_and_replays(console: Console, d: LaunchDetail) -> None:
    from rich.text import Text

    for a in d.autotune:
        console.print()
        chosen = render.config({"constexprs": a.chosen.get("kwargs", {}), "options": _options(a.chosen)})
        text = Text("autotune  ", style="bold")
        text.append(escape(f"chose {chosen} among {render.counted(len(a.configs), 'config')}"))
        text.append(" (cached)" if a.cache_hit else "")
        console.print(text)
    if d.replays:
        console.print()
        for r in d.replays:
            text = Text("replay    ", style="bold")
            text.append(escape(f"#{r.id} {render.local_time(r.created_at)} {r.backend} on {r.device}: "))
            text.append(escape(r.outcome), style="green" if r.outcome == "match" else "red")
            if r.max_abs_err is not None:
                text.append(f" (max abs err {r.max_abs_err:.3g})")
            console.print(text)


def _options(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "kwargs"}


def _print_source(console: Console, d: LaunchDetail) -> None:
    """Source lines with lanes in the margin; a line with out-of-bounds lanes is red and starts with ``!``
    (visible without colour too)."""
    from rich.text import Text

    lines = d.source_lines or []
    oob_lines = {s.line for s in lines if s.oob_lanes} | {e.line for e in d.oob_events}
    console.print()
    console.print(Text(f"source  {escape(d.kernel.file)}", style="bold"))
    console.print(Text(f"{'line':>6} {'loaded':>9} {'stored':>9} {'atomic':>9} |", style="dim"))
    outside = False
    for s in lines:
        if s.text is None and not outside:
            outside = True
            console.print(Text("       (lines outside the kernel's own source, e.g. in @triton.jit helpers)"))
        oob = s.line in oob_lines
        margin = f"{'!' if oob else ' '}{s.line:>5} {_lanes(s.load_lanes)} {_lanes(s.store_lanes)} "
        margin += f"{_lanes(s.atomic_lanes)} | "
        hot = s.load_lanes or s.store_lanes or s.atomic_lanes
        text = Text(margin, style="bold red" if oob else "cyan" if hot else "dim")
        # Tabs are layout in source code: expanded, not escaped; every other control character is escaped.
        code = escape(s.text.expandtabs(4)) if s.text is not None else ""
        _print_code(console, text, code, "red" if oob else "")
    if oob_lines:
        console.print(Text("  ! a line with out-of-bounds lanes", style="red"))


def _print_code(console: Console, margin: Text, code: str, style: str = "") -> None:
    """``margin`` then ``code``; code longer than the terminal continues under the code, never under the
    margin, broken at spaces only (a longer word makes a longer line, which the terminal wraps)."""
    from rich.text import Text

    room = console.width - margin.cell_len
    indent = len(code) - len(code.lstrip(" "))
    lines, start = [code[:indent]], indent
    for word in re.findall(r"\S+\s*", code[indent:]):
        if len(lines[-1].rstrip()) > start and len(lines[-1] + word.rstrip()) > room:
            start = indent + 4  # a continuation is indented under its statement, as Python's own
            lines.append(" " * start)
        lines[-1] += word
    blank = Text(" " * (margin.cell_len - 2) + "| ", style=margin.style)
    for i, line in enumerate(lines):
        console.print((margin if i == 0 else blank) + Text(line.rstrip(), style=style), soft_wrap=True)


def _lanes(value: int) -> str:
    return f"{value:>9,}" if value else " " * 9
