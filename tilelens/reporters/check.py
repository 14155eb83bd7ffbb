"""``tilelens check``'s findings as plain lines of text: for the terminal and for a failing test's report.

The lines hold values from the history (argument names, source lines) unescaped; whoever prints them escapes
them (``tilelens.commands.escape``, the pytest plugin's ``_printable``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tilelens.analysis.findings import (
    MIXED_ATOMIC,
    OUT_OF_BOUNDS,
    READ_WRITE,
    WRITE_WRITE,
    Elements,
    Finding,
    LaunchCheck,
    Side,
    Synchronized,
)

_WHAT = {
    WRITE_WRITE: "written by several programs with plain stores",
    READ_WRITE: "read by one program and written by another with plain accesses",
    MIXED_ATOMIC: "accessed plainly by one program and atomically by another",
}


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}{'es' if noun.endswith('ch') else 's'}"


def _program(pid: Sequence[int], grid: Sequence[int]) -> str:
    dims = 3 if grid[2] > 1 else 2 if grid[1] > 1 else 1
    return str(pid[0]) if dims == 1 else "(" + ", ".join(str(v) for v in pid[:dims]) + ")"


def _element(name: str, index: list[int] | None, offset: int) -> str:
    if index is None:
        return f"{name}+{offset}"
    return f"{name}[{', '.join(map(str, index))}]" if index else name


def elements_text(name: str, e: Elements) -> str:
    """``x[0], x[1], x[2] ... x[63]``: the first few and the last element, each by index or offset."""
    text = ", ".join(_element(name, i, o) for i, o in zip(e.first, e.first_offsets))
    if e.count > len(e.first):
        gap = " ... " if e.count > len(e.first) + 1 else ", "
        text += gap + _element(name, e.last, e.last_offset)
    return text


def side_text(side: Side, grid: Sequence[int]) -> str:
    programs = ", ".join(_program(p, grid) for p in side.first_programs)
    if side.programs > len(side.first_programs):
        programs += " ..."
    text = f"{'/'.join(side.ops)} line {side.line} by {_count(side.programs, 'program')} ({programs})"
    return text + (f": {side.source.strip()}" if side.source is not None else "")


def finding_lines(f: Finding, grid: Sequence[int]) -> list[str]:
    name = f.arg_name or (f"#{f.arg}" if f.arg >= 0 else "(no argument)")
    of = f" of {f.numel:,}" if f.numel is not None else ""
    if f.kind == OUT_OF_BOUNDS:
        e = f.elements
        head = (
            f"{f.kind}  {name}: {_count(f.lanes or 0, 'lane')} in {_count(f.events or 0, 'event')} outside "
            f"the view, element offsets {e.first_offsets[0]}..{e.last_offset}"
        )
        if f.numel is not None:
            head += f" ({name} has {f.numel:,} elements)"
        if f.dropped:
            head += f"; {f.dropped:,} outside every argument's memory, never dereferenced"
    else:
        head = (
            f"{f.kind}  {name}: {_count(f.elements.count, 'element')}{of} {_WHAT[f.kind]}: "
            f"{elements_text(name, f.elements)}"
        )
    return [head, *(f"    {side_text(s, grid)}" for s in _distinct_sides(f.sides))]


def synchronized_lines(s: Synchronized, grid: Sequence[int]) -> list[str]:
    name = s.arg_name or f"#{s.arg}"
    locks = ", ".join(s.locks) + (" ..." if s.lock_count > len(s.locks) else "")
    lines = ", ".join(str(v) for v in s.take_lines)
    head = (
        f"synchronized  {name}: {_count(s.elements.count, 'element')} ({s.kind}) under "
        f"{_count(s.lock_count, 'lock')} {locks} taken at line {lines}: {elements_text(name, s.elements)}"
    )
    return [head, *(f"    {side_text(side, grid)}" for side in _distinct_sides(s.sides))]


def _distinct_sides(sides: list[Side]) -> list[Side]:
    """Both sides, or one where they are the same accesses (the stores of one line racing each other)."""
    return sides[:1] if len(sides) == 2 and sides[0] == sides[1] else sides


def check_lines(c: LaunchCheck) -> list[str]:
    """One launch: a heading, then each finding and each synchronized conflict, indented."""
    grid = "(" + ", ".join(str(v) for v in c.grid) + ")"
    head = f"launch {c.launch_id}  {c.kernel}  grid {grid}: "
    if not c.checked:
        return [head + f"not checked: {c.reason}"]
    head += _count(len(c.findings), "finding") if c.findings else "no findings"
    out = [head]
    for f in c.findings:
        out += ["  " + line for line in finding_lines(f, c.grid)]
    for s in c.synchronized:
        out += ["  " + line for line in synchronized_lines(s, c.grid)]
    return out


def check_summary(checks: Sequence[LaunchCheck]) -> str:
    checked = [c for c in checks if c.checked]
    kinds = Counter(f.kind for c in checked for f in c.findings)
    text = f"{_count(len(checked), 'launch')} checked: "
    if kinds:
        with_findings = sum(1 for c in checked if c.findings)
        parts = ", ".join(f"{kind} {n}" for kind, n in kinds.items())
        text += f"{_count(sum(kinds.values()), 'finding')} in {_count(with_findings, 'launch')} ({parts})"
    else:
        text += "no findings"
    unchecked = len(checks) - len(checked)
    if unchecked:
        text += f"; {unchecked} not checked (no access trace)"
    return text
