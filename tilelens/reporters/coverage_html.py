"""``tilelens coverage --html DIR``: the coverage report as static HTML, for a CI artifact.

``DIR/index.html`` lists the kernel versions (statements, missed, cover, launches, tests, boundary gaps), each
linked to ``DIR/kernel-ID.html``: its boundary gaps and its source, one row per line (``id="line-N"``) whose
class says what the line did: ``executed``, ``missing`` or ``unknown`` for a statement's lines (none for other
lines), plus ``mask-partial`` for a masked access that was partly active in some launch and ``mask-full`` for
one that never was (a boundary gap). Colours come from the inline style sheet; every value from the history is
escaped (:func:`tilelens.reporters.html.e`); no script, nothing loaded from elsewhere, relative links only.

The folder appears whole or not at all (``tilelens.reporters.report.write_folder``). An existing non-empty
folder is replaced only when it is an earlier coverage report (it holds :data:`MARKER`), so rerunning the
same command (or the pytest plugin's ``--tilelens-coverage=DIR``) refreshes it, and nothing else is deleted.
"""

from __future__ import annotations

from pathlib import Path

from tilelens.analysis.coverage import CoverageReport, KernelCoverage, LineCoverage
from tilelens.errors import UsageError
from tilelens.reporters.coverage import coverage_summary, line_ranges, version_label
from tilelens.reporters.html import document, e, link, table
from tilelens.reporters.report import check_folder, write_folder

MARKER = ".tilelens-coverage"  # the file that says a folder is a coverage report TileLens may replace

_STYLE = (
    "<style>"
    ".cov td{font-family:DejaVu Sans Mono,monospace;white-space:pre;border:0;padding:0 8px}"
    ".cov tr.executed td:last-child{background:#dcf5dc}.cov tr.missing td:last-child{background:#fbd5d5}"
    ".cov tr.unknown td:last-child{background:#eeeeee}"
    ".cov tr.mask-full td:first-child{background:#ffb347}.cov tr.mask-partial td:first-child{background:#9ad39a}"
    ".legend span{display:inline-block;padding:0 6px;margin-right:8px}"
    "</style>"
)
_LEGEND = (
    '<p class="legend"><span style="background:#dcf5dc">executed</span>'
    '<span style="background:#fbd5d5">missing</span><span style="background:#eeeeee">unknown (no line data)</span>'
    '<span style="background:#9ad39a">mask partly active</span>'
    '<span style="background:#ffb347">mask never partly active</span></p>'
)


def page_name(k: KernelCoverage) -> str:
    return f"kernel-{k.kernel_id}.html"


def write_coverage_html(report: CoverageReport, folder: str | Path) -> list[str]:
    """Write the report into ``folder``; returns the file names written."""
    folder = Path(folder)
    earlier = (folder / MARKER).is_file()
    if not earlier and folder.exists() and not (folder.is_dir() and not any(folder.iterdir())):
        raise UsageError(f"{folder} exists and is neither an empty folder nor an earlier coverage report")
    check_folder(folder, force=earlier)  # never the folder holding the current directory
    files = {"index.html": index_page(report), MARKER: "tilelens coverage report\n"}
    for k in report.kernels:
        files[page_name(k)] = kernel_page(k)
    write_folder(folder, files)
    return sorted(files)


def _percent(k: KernelCoverage) -> str:
    return "?" if k.percent is None else f"{k.percent:.0f}%"


def index_page(report: CoverageReport) -> str:
    rows = [
        (
            link(page_name(k), version_label(k)),
            e(k.statements),
            e("?" if k.missing is None else len(k.missing)),
            e(_percent(k)),
            e(k.launches),
            e(k.tests),
            e(len(k.boundary)),
            e("(no line data)" if k.missing is None else line_ranges(k.missing)),
        )
        for k in report.kernels
    ]
    filters = ", ".join(f"{name} {value}" for name, value in report.filters.items() if value is not None)
    body = (
        f"<p>{e(coverage_summary(report))}</p>"
        + (f"<p>selected by {e(filters)}</p>" if filters else "")
        + table(
            (
                "kernel version",
                "statements",
                "missed",
                "cover",
                "launches",
                "tests",
                "boundary gaps",
                "missing",
            ),
            rows,
            numeric=(1, 2, 3, 4, 5, 6),
        )
    )
    return document("TileLens coverage", body)


def _row(r: LineCoverage) -> str:
    classes = [r.status or ""]
    if r.masked and r.events:
        classes.append("mask-partial" if r.partial_events else "mask-full")
    numbers = [r.launches, r.tests, r.lanes, r.active_lanes, r.masked_lanes, r.partial_events]
    cells = "".join(
        f'<td class="n">{e(v) if r.statement is not None or r.events else ""}</td>' for v in numbers
    )
    css = " ".join(c for c in classes if c)
    text = e(r.source.expandtabs(4))
    return f'<tr class="{css}" id="line-{r.line}"><td class="n">{r.line}</td>{cells}<td>{text}</td></tr>'


def kernel_page(k: KernelCoverage) -> str:
    tests = f"{k.tests} test{'' if k.tests == 1 else 's'}"
    facts = [
        ("file", f"{k.file}:{k.def_line}"),
        ("source", f"sha256 {k.source_sha256}"),
        ("launches", f"{k.launches} ({k.line_launches} with line data), {tests}"),
        ("statements", f"{k.statements}, {'?' if k.executed_statements is None else k.executed_statements} "
                       f"executed ({_percent(k)})"),
        ("missing", "(no line data)" if k.missing is None else line_ranges(k.missing) or "none"),
    ]  # fmt: skip
    body = '<p><a href="index.html">all kernel versions</a></p>' + table(
        ("", ""), [(f"<b>{e(a)}</b>", e(b)) for a, b in facts]
    )
    if k.boundary:
        gaps = "".join(
            f'<li><a href="#line-{g.line}">line {g.line}</a>: {e(g.message)} ({e(g.events)} events in '
            f"{e(g.launches)} launches)</li>"
            for g in k.boundary
        )
        body += f'<h2>boundary gaps</h2><ul class="gaps">{gaps}</ul>'
    if k.notes:
        body += "<ul>" + "".join(f"<li>{e(n)}</li>" for n in k.notes) + "</ul>"
    head = "".join(
        f"<th>{e(h)}</th>"
        for h in ("line", "launches", "tests", "lanes", "active", "masked", "partial events", "source")
    )
    rows = "".join(_row(r) for r in k.lines)
    body += f'<h2>source</h2>{_LEGEND}<table class="cov"><tr>{head}</tr>{rows}</table>'
    return document(version_label(k), _STYLE + body)
