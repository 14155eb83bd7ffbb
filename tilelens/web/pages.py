"""The HTML of the web app's pages, as plain strings.

Every value from a history (kernel names and source, tags, argv, error messages, argument names) goes
through :func:`e` (``html.escape`` with quotes, control characters shown as ``\\xNN``) before it is placed in
markup, and URLs are built with :func:`urllib.parse.quote`; nothing from a history ever becomes markup or
script. The page's only script is the package's own ``/static/heatmap.js``. The pieces a launch page shares
with ``tilelens report``'s static files are :mod:`tilelens.reporters.html`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote, urlencode

from tilelens.reporters.html import (
    arguments_table,
    config_text,
    document,
    e,
    launch_facts,
    link,
    oob_events_table,
    replays_table,
    source_table,
    table,
    when,
)

if TYPE_CHECKING:
    from tilelens.api import KernelVersion, LaunchDetail, LaunchSummary, RunSummary

NAV = '<p><a href="/">runs</a> · <a href="/launches">launches</a> · <a href="/sql">sql</a></p>'


def page(title: str, body: str) -> str:
    return document(title, body, NAV)


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
    body = launch_facts(
        d, link(f"/kernels/{kernel.id}", kernel.name), link(f"/runs/{d.run['id']}", d.run["id"])
    )
    body += _heatmaps(d)  # first after the facts: the panels fit the first screen (heatmap.js sizes them)
    body += "<h2>arguments</h2>" + _arguments(d)
    if d.oob_events:
        body += oob_events_table(d)
    if d.replays:
        body += replays_table(d)
    body += "<h2>source</h2>" + _source(d)
    return page(f"launch {launch.id} {kernel.name}", body)


def _heatmaps(d: LaunchDetail) -> str:
    """The heatmaps' controls and containers; /static/heatmap.js fills them from the JSON endpoints."""
    launch = d.launch
    gx, gy, gz = launch.grid
    options = "".join(f'<option value="{m}">{m}</option>' for m in ("count", "access", "program"))
    zooms = "".join(f'<option value="{z}">{"fit" if z == 1 else f"{z}x"}</option>' for z in (1, 2, 4, 8))
    return (
        '<h2>heatmaps</h2><p class="hm-controls">'
        f'<label>colour by <select id="heatmap-by">{options}</select></label> '
        f'<label>zoom <select id="heatmap-zoom">{zooms}</select></label></p>'
        '<div id="legend"></div>'
        f'<div id="walk"><span class="grid-view"><canvas id="programs" data-grid="{gx},{gy},{gz}"></canvas></span>'
        f'<span><label>program <input id="program" type="number" min="0" max="{gx * gy * gz - 1}"></label> '
        '<button id="program-all" type="button">all</button> <span id="program-text"></span><br>'
        '<button id="step-prev" type="button">&#9664;</button> <input id="step" type="range" min="0" max="0" value="0"> '
        '<button id="step-next" type="button">&#9654;</button> <span id="step-text">events: step through'
        " them with the arrows</span></span></div>"
        f'<div id="heatmaps" data-launch="{launch.id}"></div><div id="tip"></div>'
        '<script src="/static/heatmap.js"></script>'
    )


def _arguments(d: LaunchDetail) -> str:
    return arguments_table(d)


def _source(d: LaunchDetail) -> str:
    return source_table(d)


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
