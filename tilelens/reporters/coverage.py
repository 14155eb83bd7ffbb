"""``tilelens coverage``'s report as plain lines of text: for the terminal and the pytest plugin's summary.

The lines hold values from the history (kernel names, source lines) unescaped; whoever prints them escapes them
(``tilelens.commands.escape``, the pytest plugin's ``_printable``).
"""

from __future__ import annotations

from collections.abc import Sequence

from tilelens.analysis.coverage import CoverageReport, KernelCoverage


def line_ranges(lines: Sequence[int]) -> str:
    """``3, 5-7, 12``: sorted line numbers with runs folded, as coverage tools list missing lines."""
    parts: list[str] = []
    start = prev = None
    for line in sorted(lines):
        if prev is not None and line == prev + 1:
            prev = line
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = line
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


def version_label(k: KernelCoverage) -> str:
    return f"{k.name}@{k.source_sha256[:8]}"


def _percent(k: KernelCoverage) -> str:
    return "?" if k.percent is None else f"{k.percent:.0f}%"


def coverage_lines(report: CoverageReport) -> list[str]:
    """A table (one row per kernel version: statements, missed, cover, launches, tests, missing lines), then
    each version's boundary gaps and notes, then a total line."""
    rows = []
    for k in report.kernels:
        miss = "?" if k.missing is None else str(len(k.missing))
        missing = "(no line data)" if k.missing is None else line_ranges(k.missing)
        rows.append(
            (version_label(k), str(k.statements), miss, _percent(k), str(k.launches), str(k.tests), missing)
        )
    head = ("Kernel", "Stmts", "Miss", "Cover", "Launches", "Tests", "Missing")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]

    def fmt(r: Sequence[str]) -> str:
        cells = [r[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(r[1:-1], widths[1:]))]
        return "  ".join([*cells, r[-1]]).rstrip()

    out = [fmt(head), "-" * len(fmt(head)), *(fmt(r) for r in rows)]
    for k in report.kernels:
        if not k.boundary and not k.notes:
            continue
        out.append(f"{version_label(k)} ({k.file}:{k.def_line}):")
        for gap in k.boundary:
            out.append(f"  boundary: {gap.message} ({gap.events} events in {gap.launches} launches)")
            out.append(f"    {gap.line}: {gap.source.strip()}")
        out += [f"  note: {note}" for note in k.notes]
    out.append(coverage_summary(report))
    return out


def coverage_summary(report: CoverageReport) -> str:
    known = [k for k in report.kernels if k.missing is not None]  # versions with line data
    statements = sum(k.statements for k in known)
    executed = sum(k.executed_statements or 0 for k in known)
    gaps = sum(len(k.boundary) for k in report.kernels)
    n = len(report.kernels)
    text = (
        f"{n} kernel version{'s' if n != 1 else ''}, {report.launches} launch{'es' if report.launches != 1 else ''}: "
        f"{executed} of {statements} statements executed"
    )
    if len(known) < n:
        text += f" in the {len(known)} with line data"
    if statements:
        text += f" ({100.0 * executed / statements:.0f}%)"
    return text + f"; {gaps} boundary gap{'s' if gaps != 1 else ''} (masks never partly active)"
