"""HTML pieces shared by ``tilelens serve``'s pages and ``tilelens report``'s static files.

Both show the same launch the same way (facts, arguments, out-of-bounds events, replays, source with lane
counts); only where links lead differs (``/runs/ID`` on the server, ``index.html`` in a report folder), so
callers pass the links in. Every value from a history goes through :func:`e` (``html.escape`` with quotes,
control characters shown as ``\\xNN``) before it is placed in markup; nothing from a history ever becomes markup
or script.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tilelens.store.read.results import LaunchDetail

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")

STYLE = """
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:1.2em 2em;color:#222;font-size:14px}
table{border-collapse:collapse;margin:.6em 0}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}
td.n{text-align:right}pre{background:#f6f6f6;padding:6px;overflow:auto}a{color:#1a5fb4}.bad{color:#c01c28}
.src td{font-family:DejaVu Sans Mono,monospace;white-space:pre;border:0;padding:0 8px}.hot{background:#fff4d6}
.src tr.oob{background:#fde2e2;color:#b3141c}.src tr.oob td:first-child::before{content:"! "}
.src tr.sel{outline:2px solid #1a5fb4}
#tip{position:fixed;display:none;background:#222;color:#fff;padding:4px 8px;font-size:12px;pointer-events:none}
canvas.heatmap{display:block;image-rendering:pixelated}
#heatmaps{display:flex;flex-wrap:wrap;gap:10px 28px;align-items:flex-start}
.panel .scroll{overflow:auto;max-width:92vw;max-height:70vh}.panel .plot{position:relative;padding:14px 0 0 44px}
.tick{position:absolute;font-size:10px;color:#555;line-height:10px;white-space:nowrap}
.row-tick{left:0;width:40px;text-align:right}
#legend span.item{display:inline-block;margin:0 12px 4px 0}#legend i{display:inline-block;width:12px;height:12px;
vertical-align:-1px;margin-right:4px;border:1px solid #ccc}
#walk{display:flex;gap:16px;align-items:center;margin:6px 0 10px 0}#step{width:320px;vertical-align:middle}
#programs{image-rendering:pixelated;cursor:pointer;border:1px solid #ccc}
form.filters input{width:11em}textarea{font-family:DejaVu Sans Mono,monospace;width:100%;max-width:60em}
"""


def e(value: Any) -> str:
    """A value as HTML text or attribute: markup escaped, control characters visible."""
    text = "" if value is None else str(value)
    return html.escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text), quote=True)


def document(title: str, body: str, nav: str = "") -> str:
    """A whole page: ``nav`` (HTML) above the title; the style sheet inline, nothing loaded from elsewhere."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        f"<title>{e(title)} · TileLens</title><style>{STYLE}</style></head><body>"
        f"{nav}<h1>{e(title)}</h1>{body}</body></html>"
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """A table whose cells are already HTML (escape values with :func:`e` first)."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def link(href: str, text: Any) -> str:
    return f'<a href="{e(href)}">{e(text)}</a>'


def when(value: Any) -> str:
    return e(value.strftime("%Y-%m-%d %H:%M:%S UTC")) if value is not None else "-"


def config_text(config: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in (config.get("constexprs") or {}).items()]
    parts += [f"{k}={v}" for k, v in (config.get("options") or {}).items() if v is not None]
    return " ".join(parts) or "-"


def bad_if(flag: Any, text: Any) -> str:
    """``text`` escaped, in red when ``flag`` holds (a problem: an error, out-of-bounds lanes)."""
    return f'<span class="{"bad" if flag else ""}">{e(text)}</span>'


def launch_facts(d: LaunchDetail, kernel_html: str, run_html: str) -> str:
    """The launch's facts as a two-column table; ``kernel_html``/``run_html``: how to show (link) each."""
    launch, kernel = d.launch, d.kernel
    facts = [
        ("kernel", kernel_html),
        ("file", e(f"{kernel.file}:{kernel.def_line}")),
        ("source", e(f"sha256 {kernel.source_sha256}")),
        ("run", run_html + (f" (tag {e(d.run['tag'])})" if d.run["tag"] else "")),
        ("started", when(launch.started_at) + e(f", {launch.duration_s:.3f} s, {launch.backend} on {launch.device}")),
        ("grid", e(f"({launch.grid[0]}, {launch.grid[1]}, {launch.grid[2]})")),
        ("config", e(config_text(launch.config))),
        ("status", bad_if(launch.status != "ok", launch.status)),
        ("oob lanes", e(launch.oob_lanes)),
    ]  # fmt: skip
    if launch.test_nodeid:
        facts.append(("test", e(launch.test_nodeid)))
    if launch.error:
        facts.append(("error", f"<pre>{e(launch.error)}</pre>"))
    for a in d.autotune:
        options = {k: v for k, v in a.chosen.items() if k != "kwargs"}
        chosen = config_text({"constexprs": a.chosen.get("kwargs", {}), "options": options})
        facts.append(
            (
                "autotune",
                e(f"chose {chosen} among {len(a.configs)} configs" + (" (cached)" if a.cache_hit else "")),
            )
        )
    return table(("", ""), [(f"<b>{e(k)}</b>", v) for k, v in facts])


def arguments_table(d: LaunchDetail) -> str:
    rows = []
    for a in d.args:
        value = ("written" if a.changed else "unchanged") if a.kind == "tensor" else json.dumps(a.value)
        if a.snapshot_elements is not None:  # a sparse snapshot: the untouched elements are unknown
            value += f", snapshot of the {a.snapshot_elements} touched elements only"
        acc = a.access
        rows.append(
            (
                e(a.position), e(a.name), e(a.kind), e(a.dtype or ""), e(a.shape if a.shape is not None else ""),
                e(a.strides if a.strides is not None else ""), e(value),
                e(f"{acc.loads} loads, {acc.stores} stores, {acc.atomics} atomics, {acc.oob_lanes} oob lanes") if acc else "",
            )
        )  # fmt: skip
    return table(("#", "name", "kind", "dtype", "shape", "strides", "value", "access"), rows, numeric=(0,))


def oob_events_table(d: LaunchDetail, link_lines: bool = False) -> str:
    """The listed out-of-bounds events; ``link_lines``: each line number links to its row of the source."""
    rows = [
        (e(f"({', '.join(str(p) for p in ev.pid)})"), e(ev.op), e(ev.arg_name or "no argument"),
         link(f"#line-{ev.line}", ev.line) if link_lines else e(ev.line),
         e(f"{ev.oob_lanes} of {ev.active}"), e(ev.offsets and f"{ev.offsets[0]}..{ev.offsets[1]}"),
         e((ev.source_text or "").strip()))
        for ev in d.oob_events
    ]  # fmt: skip
    head = f"<h2>out-of-bounds events (first {len(d.oob_events)} of {d.oob_event_count})</h2>"
    return head + table(("program", "op", "argument", "line", "lanes outside", "offsets", "source"), rows)


def replays_table(d: LaunchDetail) -> str:
    replays = [
        (e(r.id), when(r.created_at), e(f"{r.backend} on {r.device}"), e(r.outcome), e(r.max_abs_err), e(r.message or ""))
        for r in d.replays
    ]  # fmt: skip
    return "<h2>replays</h2>" + table(
        ("replay", "when", "where", "outcome", "max abs err", "message"), replays
    )


def source_table(d: LaunchDetail, oob_column: bool = False) -> str:
    """The kernel's source with per-line lane counts (rows ``id="line-N"``). A line with out-of-bounds lanes
    (in its counts or among the listed events) gets ``class="oob"``: red, ``!`` before its number;
    ``oob_column`` adds a column that says so in words too (a report read without its style)."""
    rows = []
    oob_lines = {s.line for s in d.source_lines or [] if s.oob_lanes} | {ev.line for ev in d.oob_events}
    for s in d.source_lines or []:
        hot = s.load_lanes or s.store_lanes or s.atomic_lanes
        cells = [str(s.line), *(str(v) if v else "" for v in (s.load_lanes, s.store_lanes, s.atomic_lanes))]
        text = e((s.text or "").expandtabs(4))
        marked = s.line in oob_lines
        css = "oob" if marked else "hot" if hot else ""
        mark = ("<td>out of bounds</td>" if marked else "<td></td>") if oob_column else ""
        rows.append(
            f'<tr class="{css}" id="line-{s.line}">'
            + "".join(f'<td class="n">{c}</td>' for c in cells)
            + f"{mark}<td>{text}</td></tr>"
        )
    extra = "<th>oob</th>" if oob_column else ""
    head = f"<tr><th>line</th><th>loaded</th><th>stored</th><th>atomic</th>{extra}<th></th></tr>"
    return f'<table class="src">{head}{"".join(rows)}</table>'
