"""How ``tilelens diff`` prints a :class:`~tilelens.api.LaunchDiff` or :class:`~tilelens.api.VersionDiff`.

Every value comes from a history (kernel names, sources, config values), so every line goes out as
``rich.text.Text`` with its control characters escaped; nothing is parsed as markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from tilelens.commands import render
from tilelens.commands.escape import escape

if TYPE_CHECKING:
    from rich.console import Console

    from tilelens.api import LaunchDiff, TensorDiff, VersionDiff


def _line(console: Console, name: str, value: str, style: str = "") -> None:
    line = Text(f"  {name:<11}", style="bold")
    line.append(escape(value), style=style)
    console.print(line)


def _value(value: Any) -> str:
    return "(none)" if value is None else str(value)


def _source_diff(console: Console, lines: list[str]) -> None:
    for line in lines:
        style = "green" if line.startswith("+") else "red" if line.startswith("-") else ""
        style = "bold" if line.startswith(("+++", "---")) else "cyan" if line.startswith("@@") else style
        console.print(Text("    " + escape(line.expandtabs(4)), style=style))


def print_launch_diff(d: LaunchDiff) -> None:
    console = render.out()
    verdict = Text(f"launches {d.a} and {d.b}: ", style="bold")
    if not d.same_kernel:  # said first: what follows compares two kernels' arguments by name
        verdict.append("different kernels", style="bold red")
        verdict.append(escape(f": {d.kernel_a} and {d.kernel_b}; arguments compared by name"))
    else:
        verdict.append("same" if d.same else "different", style="green" if d.same else "bold red")
    console.print(verdict)
    if d.source_sha_a == d.source_sha_b:
        _line(console, "source", f"same (sha256 {d.source_sha_a[:12]})")
    else:
        _line(console, "source", f"{d.source_sha_a[:12]} -> {d.source_sha_b[:12]}", "yellow")
        _source_diff(console, d.source_diff)
    for title, changes in (("launch", d.launch), ("config", d.config), ("argument", d.args)):
        for c in changes:
            if title == "launch" and c.name == "kernel":
                continue  # the verdict named both
            _line(console, title, f"{c.name}: {_value(c.a)} -> {_value(c.b)}", "yellow")
    for o in d.outputs:
        _line(console, "output", _output(o), "" if o.same else "yellow")
    t = d.trace
    if t.events_a is None and t.events_b is None:
        _line(console, "trace", "not recorded")
    elif t.same:
        _line(console, "trace", f"same ({render.counted(t.events_a or 0, 'event')})")
    elif t.first is None:
        _line(console, "trace", t.note or "differs", "yellow")
    else:
        e = t.first
        where = f"pid {render.grid(e.pid)} " if e.pid is not None else ""
        text = (
            f"{render.count(t.events_a)} and {render.count(t.events_b)} events; first difference at event "
            f"{e.index}: {where}{e.op} line {e.line}, {e.field}: {_value(e.a)} -> {_value(e.b)}"
        )
        _line(console, "trace", text, "yellow")
        if e.lane is not None and e.lane_a is not None and e.lane_b is not None:
            _line(
                console,
                "",
                f"first lane that differs: {e.lane}: {_lane(e.lane_a)} -> {_lane(e.lane_b)}",
                "yellow",
            )


def _lane(lane: dict[str, Any]) -> str:
    state = "active" if lane["active"] else "masked off"
    return f"offset {lane['offset']} {state}" + (", out of bounds" if lane["oob"] else "")


def _output(o: TensorDiff) -> str:
    # A note with elements compared qualifies the comparison (sparse snapshots); without, it replaces it.
    also = f" ({o.note})" if o.note is not None and o.elements is not None else ""
    if o.same:
        return f"{o.name}: same" + (" (bit-exact)" if o.bit_exact else "") + also
    if o.note is not None and not also:
        return f"{o.name}: {o.note}"
    index = "[" + ", ".join(str(i) for i in o.first_index or []) + "]"
    return (
        f"{o.name}: {render.count(o.differing)} of {render.count(o.elements)} elements differ; first "
        f"{index}: {o.first_a} -> {o.first_b}; max abs err {o.max_abs_err:.6g}, max rel err "
        f"{o.max_rel_err:.6g}{also}"
    )


def print_version_diff(d: VersionDiff) -> None:
    from rich import box
    from rich.table import Table

    console = render.out()
    verdict = Text(f"{escape(d.a.kernel)} {d.a.source_sha256[:12]} and {d.b.source_sha256[:12]}: ", "bold")
    verdict.append("same" if d.same else "different", style="green" if d.same else "bold red")
    console.print(verdict)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("")
    table.add_column(d.a.source_sha256[:12], justify="right")
    table.add_column(d.b.source_sha256[:12], justify="right")
    for name in (
        "launches",
        "programs",
        "bytes_per_program",
        "lanes_per_program",
        "oob_lanes",
        "oob_launches",
    ):
        x, y = getattr(d.a, name), getattr(d.b, name)
        style = "yellow" if name in d.differs else ""
        table.add_row(render.cell(name.replace("_", " ")), _figure(x, style), _figure(y, style))
    for key in sorted(set(d.a.autotune) | set(d.b.autotune)):
        style = "yellow" if "autotune" in d.differs else ""
        table.add_row(
            render.cell(f"autotune {key}"),
            render.cell(_choices(d.a.autotune.get(key, {})), style),
            render.cell(_choices(d.b.autotune.get(key, {})), style),
        )
    render.fit(console, table)
    console.print(table)
    if d.source_diff:
        _source_diff(console, d.source_diff)


def _figure(value: Any, style: str) -> Text:
    if isinstance(value, float):
        return render.cell(f"{value:.6g}", style)
    return render.cell("-" if value is None else render.count(value), style)


def _choices(choices: dict[str, int]) -> str:
    return "; ".join(f"{config} x{n}" for config, n in choices.items()) or "-"
