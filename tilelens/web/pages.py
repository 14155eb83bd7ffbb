"""The HTML of the web app's pages, as plain strings.

Every value from a history (kernel names and source, tags, argv, error messages, argument names) goes
through :func:`e` (``html.escape`` with quotes, control characters shown as ``\\xNN``) before it is placed in
markup, and URLs are built with :func:`urllib.parse.quote`; nothing from a history ever becomes markup or
script. The page's only script is the package's own ``/static/heatmap.js``.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

if TYPE_CHECKING:
    from tilelens.api import KernelVersion, LaunchDetail, LaunchSummary, RunSummary

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")

STYLE = """
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:1.2em 2em;color:#222;font-size:14px}
table{border-collapse:collapse;margin:.6em 0}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}
td.n{text-align:right}pre{background:#f6f6f6;padding:6px;overflow:auto}a{color:#1a5fb4}.bad{color:#c01c28}
.src td{font-family:DejaVu Sans Mono,monospace;white-space:pre;border:0;padding:0 8px}.hot{background:#fff4d6}
#tip{position:fixed;display:none;background:#222;color:#fff;padding:4px 8px;font-size:12px;pointer-events:none}
canvas.heatmap{display:block;margin:4px 0 14px 0;image-rendering:pixelated}
form.filters input{width:11em}
"""


def e(value: Any) -> str:
    """A value as HTML text or attribute: markup escaped, control characters visible."""
    text = "" if value is None else str(value)
    return html.escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text), quote=True)


def page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        f"<title>{e(title)} · TileLens</title><style>{STYLE}</style></head><body>"
        '<p><a href="/">runs</a> · <a href="/launches">launches</a></p>'
        f"<h1>{e(title)}</h1>{body}</body></html>"
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


def runs_page(runs: list[RunSummary]) -> str:
    rows = [
        (
            link(f"/runs/{r.id}", r.id), when(r.started_at), e(r.status), e(r.tag or ""), e(" ".join(r.argv)),
            e(r.launches), e(r.kernels), e(r.errors), e(r.oob_lanes),
        )
        for r in runs
    ]  # fmt: skip
    headers = ("run", "started", "status", "tag", "argv", "launches", "kernels", "errors", "oob lanes")
    return page("runs", table(headers, rows, numeric=(0, 5, 6, 7, 8)) if rows else "<p>no runs</p>")


FILTERS = ("kernel", "status", "test", "tag")


def launches_page(title: str, launches: list[LaunchSummary], filters: dict[str, str], oob: bool) -> str:
    fields = "".join(
        f'<label>{name} <input name="{name}" value="{e(filters.get(name, ""))}"></label> ' for name in FILTERS
    )
    checked = " checked" if oob else ""
    form = (
        f'<form class="filters" method="get">{fields}<label><input type="checkbox" name="oob" value="1"{checked}>'
        ' out of bounds</label> <button type="submit">filter</button></form>'
    )
    rows = [
        (
            link(f"/launches/{s.id}", s.id), link(f"/runs/{s.run_id}", s.run_id), e(s.kernel),
            e(f"({s.grid[0]}, {s.grid[1]}, {s.grid[2]})"), e(config_text(s.config)), e(s.status),
            e(s.test_nodeid or ""), e(s.active_lanes), f'<span class="{"bad" if s.oob_lanes else ""}">{e(s.oob_lanes)}</span>',
        )
        for s in launches
    ]  # fmt: skip
    headers = ("launch", "run", "kernel", "grid", "config", "status", "test", "lanes", "oob lanes")
    body = form + (table(headers, rows, numeric=(0, 1, 7, 8)) if rows else "<p>no launches</p>")
    return page(title, body)


def launch_page(d: LaunchDetail) -> str:
    launch, kernel = d.launch, d.kernel
    facts = [
        ("kernel", link(f"/kernels/{kernel.id}", kernel.name)),
        ("file", e(f"{kernel.file}:{kernel.def_line}")),
        ("source", e(f"sha256 {kernel.source_sha256}")),
        ("run", link(f"/runs/{d.run['id']}", d.run["id"]) + (f" (tag {e(d.run['tag'])})" if d.run["tag"] else "")),
        ("started", when(launch.started_at) + e(f", {launch.duration_s:.3f} s, {launch.backend} on {launch.device}")),
        ("grid", e(f"({launch.grid[0]}, {launch.grid[1]}, {launch.grid[2]})")),
        ("config", e(config_text(launch.config))),
        ("status", f'<span class="{"bad" if launch.status != "ok" else ""}">{e(launch.status)}</span>'),
        ("oob lanes", e(launch.oob_lanes)),
    ]  # fmt: skip
    if launch.test_nodeid:
        facts.append(("test", e(launch.test_nodeid)))
    if launch.error:
        facts.append(("error", f"<pre>{e(launch.error)}</pre>"))
    for a in d.autotune:
        chosen = config_text({"constexprs": a.chosen.get("kwargs", {}), "options": _options(a.chosen)})
        facts.append(
            (
                "autotune",
                e(f"chose {chosen} among {len(a.configs)} configs" + (" (cached)" if a.cache_hit else "")),
            )
        )
    body = table(("", ""), [(f"<b>{e(k)}</b>", v) for k, v in facts])
    body += "<h2>arguments</h2>" + _arguments(d)
    body += (
        f'<h2>heatmaps</h2><p><label>colour by <select id="heatmap-by"><option value="access">access</option>'
        f'<option value="program">program</option></select></label></p>'
        f'<div id="heatmaps" data-launch="{launch.id}"></div><div id="tip"></div>'
        '<script src="/static/heatmap.js"></script>'
    )
    if d.oob_events:
        rows = [
            (e(f"({', '.join(str(p) for p in ev.pid)})"), e(ev.op), e(ev.arg_name or "no argument"), e(ev.line),
             e(f"{ev.oob_lanes} of {ev.active}"), e(ev.offsets and f"{ev.offsets[0]}..{ev.offsets[1]}"),
             e((ev.source_text or "").strip()))
            for ev in d.oob_events
        ]  # fmt: skip
        body += f"<h2>out-of-bounds events (first {len(d.oob_events)} of {d.oob_event_count})</h2>"
        body += table(("program", "op", "argument", "line", "lanes outside", "offsets", "source"), rows)
    if d.replays:
        replays = [
            (e(r.id), when(r.created_at), e(f"{r.backend} on {r.device}"), e(r.outcome), e(r.max_abs_err), e(r.message or ""))
            for r in d.replays
        ]  # fmt: skip
        body += "<h2>replays</h2>" + table(
            ("replay", "when", "where", "outcome", "max abs err", "message"), replays
        )
    body += "<h2>source</h2>" + _source(d)
    return page(f"launch {launch.id} {kernel.name}", body)


def _options(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != "kwargs"}


def _arguments(d: LaunchDetail) -> str:
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


def _source(d: LaunchDetail) -> str:
    rows = []
    for s in d.source_lines or []:
        hot = s.load_lanes or s.store_lanes or s.atomic_lanes
        cells = [str(s.line), *(str(v) if v else "" for v in (s.load_lanes, s.store_lanes, s.atomic_lanes))]
        text = e((s.text or "").expandtabs(4))
        rows.append(
            f'<tr class="{"hot" if hot else ""}" id="line-{s.line}">'
            + "".join(f'<td class="n">{c}</td>' for c in cells)
            + f"<td>{text}</td></tr>"
        )
    head = "<tr><th>line</th><th>loaded</th><th>stored</th><th>atomic</th><th></th></tr>"
    return f'<table class="src">{head}{"".join(rows)}</table>'


def kernel_page(versions: list[KernelVersion], current: int) -> str:
    name = versions[0].name if versions else "kernel"
    rows = [
        (
            e(v.id) + (" (this)" if v.id == current else ""), e(v.source_sha256[:16]), e(f"{v.file}:{v.def_line}"),
            e(v.launches), e(v.oob_launches), e(v.error_launches), when(v.first_at), when(v.last_at),
            link(f"/launches/{v.last_launch}", v.last_launch) if v.last_launch is not None else "-",
        )
        for v in versions
    ]  # fmt: skip
    headers = (
        "version",
        "source sha256",
        "file",
        "launches",
        "oob",
        "errors",
        "first",
        "last",
        "last launch",
    )
    body = table(headers, rows, numeric=(3, 4, 5))
    body += "<p>" + link("/launches?" + urlencode({"kernel": name}), f"all launches of {name}") + "</p>"
    for v in versions:
        body += f"<h2>version {e(v.id)}: sha256 {e(v.source_sha256[:16])}</h2><pre>{e(v.source)}</pre>"
    return page(f"kernel {name}", body)


def not_found(message: str) -> str:
    return page("not found", f"<p>{e(message)}</p>")


def error_page(title: str, message: str) -> str:
    return page(title, f'<p class="bad">{e(message)}</p>')


__all__ = ["e", "quote"]
