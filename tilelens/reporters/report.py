"""``tilelens report --html DIR``: one run of a history as static HTML files, for a CI artifact.

``DIR/index.html`` holds the run (command, status, times, counts) and a table of its launches; each of the
first ``max_pages`` launches (those with an error, out-of-bounds lanes or a replay that did not match first,
then the others in launch order) gets ``DIR/launch-ID.html``: facts, accesses, arguments, out-of-bounds events
linked to their source lines, the heatmaps as inline SVG (hover a cell for what it holds), replays, and the
kernel source with the lines of those events marked. The pages are the same HTML as ``tilelens serve``'s
(:mod:`tilelens.reporters.html`), with relative links only, no script and nothing loaded from elsewhere, so the
folder reads the same opened from disk anywhere.

Reading goes through :class:`tilelens.store.read.query.HistoryQuery` (read-only: the history is never
written). The folder appears whole or not at all (written beside it, then renamed into place); an existing
non-empty one is replaced only with ``force``, and never when it holds the current directory.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tilelens.errors import RunNotFoundError, TileLensError, UsageError
from tilelens.records import PROBLEMS
from tilelens.reporters.html import (
    arguments_table,
    bad_if,
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
    from tilelens.store.read.query import HistoryQuery
    from tilelens.store.read.results import LaunchDetail, LaunchSummary, RunSummary

MAX_PAGES = 50  # launches with a page of their own, by default
INDEX_ROWS = 10_000  # launches listed in index.html at most
OOB_EVENTS = 50  # out-of-bounds events listed per launch page
# Cells per argument in a page's SVG heatmap (each ~600 bytes with its tooltip): larger tensors are binned.
REPORT_MAX_CELLS = 1 << 11


@dataclass(frozen=True)
class Report:
    path: Path
    run_id: int
    launches: int  # launches in the run
    listed: int  # rows of the index's table
    pages: tuple[int, ...]  # launches with a page of their own, in launch order
    files: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "run": self.run_id,
            "launches": self.launches,
            "listed": self.listed,
            "pages": list(self.pages),
            "files": list(self.files),
        }


def write_report(
    query: HistoryQuery,
    folder: str | Path,
    *,
    run: int | None = None,
    max_pages: int = MAX_PAGES,
    force: bool = False,
) -> Report:
    """Write the report of run ``run`` (default: the newest) into ``folder`` (see the module docstring)."""
    folder = Path(folder)
    if max_pages < 0:
        raise UsageError(f"the number of launch pages is 0 or more, not {max_pages}")
    check_folder(folder, force)
    found = query.runs(run=run, limit=1)
    if not found:
        label = query.reader.label
        raise RunNotFoundError(
            f"no run {run} in history {label}" if run is not None else f"no runs in history {label}"
        )
    r = found[0]
    launches = sorted(query.launches(run=r.id, limit=INDEX_ROWS), key=lambda s: s.id)
    outcomes = {
        int(launch_id): str(outcome)
        for launch_id, outcome in query.sql(
            "SELECT p.launch_id, p.outcome FROM replays p JOIN launches l ON l.id = p.launch_id "
            f"WHERE l.run_id = {int(r.id)} ORDER BY p.id"
        ).rows
    }  # the newest replay of each launch

    def flagged(s: LaunchSummary) -> bool:
        return s.status != "ok" or s.oob_lanes > 0 or outcomes.get(s.id) in PROBLEMS

    paged = sorted(sorted(launches, key=lambda s: (not flagged(s), s.id))[:max_pages], key=lambda s: s.id)
    files = {
        "index.html": index_page(r, launches, outcomes, {s.id for s in paged}, max_pages, query.reader.label)
    }
    for s in paged:
        detail = query.launch(s.id, oob_events=OOB_EVENTS, source=True)
        files[f"launch-{s.id}.html"] = launch_page(detail, _heatmap_svg(query, detail))
    write_folder(folder, files)
    return Report(folder, r.id, r.launches, len(launches), tuple(s.id for s in paged), tuple(sorted(files)))


def _heatmap_svg(query: HistoryQuery, d: LaunchDetail) -> str:
    """The launch's heatmaps as SVG markup, or a paragraph saying why there are none."""
    from tilelens.reporters.heatmap_svg import svg_text
    from tilelens.reporters.heatmaps import heatmap_layout
    from tilelens.store.read.heatmaps import launch_heatmaps

    try:
        maps = launch_heatmaps(query, d.launch.id, max_cells=REPORT_MAX_CELLS)
    except TileLensError as exc:  # a missing or corrupt trace blob
        return f'<p class="bad">no heatmaps: {e(exc)}</p>'
    if not maps.heatmaps:
        return "<p>no tensor arguments</p>"
    lay = heatmap_layout(maps, title=f"launch {d.launch.id} {d.kernel.name}")
    return svg_text(lay, maps.grid, maps.kinds)


def index_page(
    r: RunSummary,
    launches: list[LaunchSummary],
    outcomes: dict[int, str],
    paged: set[int],
    max_pages: int,
    label: str,
) -> str:
    from tilelens.version import __version__

    took = f", {(r.finished_at - r.started_at).total_seconds():.1f} s" if r.finished_at else ""
    facts = [
        ("command", f"<code>{e(shlex.join(r.argv))}</code>"),
        ("status", bad_if(r.status in PROBLEMS, r.status) + (e(f" (exit {r.exit_code})") if r.exit_code is not None else "")),
        ("tag", e(r.tag or "-")),
        ("started", when(r.started_at) + e(took)),
        ("finished", when(r.finished_at)),
        ("where", e(f"{r.host}: {r.cwd}")),
        ("launches", e(r.launches)),
        ("kernels", e(r.kernels)),
        ("errors", bad_if(r.errors, r.errors)),
        ("oob lanes", bad_if(r.oob_lanes, r.oob_lanes)),
        ("history", e(label)),
    ]  # fmt: skip
    body = table(("", ""), [(f"<b>{e(k)}</b>", v) for k, v in facts])
    body += (
        f"<p>{len(paged)} of {r.launches} launches have a page of their own (at most {max_pages}: those with an "
        "error, out-of-bounds lanes or a replay that did not match first, then the others in launch order).</p>"
    )
    if len(launches) < r.launches:
        body += f"<p>The table lists the last {len(launches)} of the run's {r.launches} launches.</p>"
    rows = [
        (
            link(f"launch-{s.id}.html", s.id) if s.id in paged else e(s.id), e(s.seq), e(s.kernel),
            e(f"({s.grid[0]}, {s.grid[1]}, {s.grid[2]})"), e(config_text(s.config)), bad_if(s.status != "ok", s.status),
            e(s.active_lanes), bad_if(s.oob_lanes, s.oob_lanes),
            bad_if(outcomes.get(s.id) in PROBLEMS, outcomes.get(s.id, "-")),
        )
        for s in launches
    ]  # fmt: skip
    headers = ("launch", "seq", "kernel", "grid", "config", "status", "lanes", "oob lanes", "replay")
    body += "<h2>launches</h2>" + (
        table(headers, rows, numeric=(0, 1, 6, 7)) if rows else "<p>no launches</p>"
    )
    body += f"<p>Written by TileLens {e(__version__)}.</p>"
    return document(f"report of run {r.id}", body)


def launch_page(d: LaunchDetail, heatmap_svg: str) -> str:
    run = d.run["id"]
    body = launch_facts(d, e(d.kernel.name), link("index.html", run))
    summary = [(e(k.replace("_", " ")), e(v)) for k, v in d.summary.items() if v is not None]
    if d.unattributed is not None:
        summary.append(("unattributed", e(f"{d.unattributed.loads} loads, {d.unattributed.stores} stores")))
    if d.trace_error:
        summary.append(("trace", bad_if(True, d.trace_error)))
    body += "<h2>accesses</h2>" + table(("", ""), summary, numeric=(1,))
    body += "<h2>arguments</h2>" + arguments_table(d)
    if d.oob_events:
        body += oob_events_table(d, link_lines=True)
    body += f"<h2>heatmaps</h2><p>Binned at {REPORT_MAX_CELLS:,} cells per argument; hover a cell.</p>"
    body += heatmap_svg
    if d.replays:
        body += replays_table(d)
    oob = any(s.oob_lanes for s in d.source_lines or []) or bool(d.oob_events)
    body += "<h2>source</h2>" + ("<p>Lines with out-of-bounds lanes are marked.</p>" if oob else "")
    body += source_table(d, oob_column=True)
    nav = f"<p>{link('index.html', f'run {run}')}</p>"
    return document(f"launch {d.launch.id} {d.kernel.name}", body, nav)


def check_folder(folder: Path, force: bool) -> None:
    """Raise UsageError unless ``folder`` may receive a report: missing, empty, or (``force``) replaceable; the
    folder holding the current directory never is."""
    if not folder.exists():
        return
    if folder.is_dir() and not any(folder.iterdir()):
        return
    if not force:
        raise UsageError(f"{folder} exists and is not an empty folder (--force replaces it)")
    here = Path.cwd().resolve()
    if folder.resolve() == here or folder.resolve() in here.parents:
        raise UsageError(f"{folder} holds the current directory: it is never replaced, even with --force")


def write_folder(folder: Path, files: dict[str, str]) -> None:
    """``files`` (name -> text) as ``folder``, written beside it and renamed into place: whole or not at all."""
    parent = folder.resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write into {parent}: not a writable folder")
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=parent))
    try:
        for name, text in files.items():
            (staging / name).write_text(text, encoding="utf-8")
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the report from a CI artifact's other readers
        if folder.exists() or folder.is_symlink():
            shutil.rmtree(folder) if folder.is_dir() and not folder.is_symlink() else folder.unlink()
        os.replace(staging, folder)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise UsageError(f"cannot write {folder}: {exc.strerror or exc}") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
