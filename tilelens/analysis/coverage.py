"""``tilelens coverage``: which lines of each kernel version the selected launches ran, and with what masks.

Per kernel version (a ``kernels`` row: one source), from its launches:

* executed lines: the kernel function's lines a launch ran (``launches.executed_lines``, captured by
  interpreted launches of a coverage recording), together with every line that made a memory event (the access
  trace's ``line``: compiled launches with a derived trace, recordings without line capture);
* statements: the executable statements of the function's body, from its stored source (not the ``def`` line,
  decorators or the docstring). A statement ran when any of its own lines ran (a compound statement's own lines
  are its header, up to its first inner statement). Missing: statements no launch ran; unknown (None) when
  no launch of the version had line data and no memory event says otherwise;
* per line, its memory events: lanes, active (mask-true) lanes, masked-off lanes, and events partly active
  (0 < active < lanes);
* boundary coverage: each masked access (a ``tl.load``/``tl.store``/atomic call given a mask or
  ``boundary_check``, or a line with masked-off lanes) that ran but was never partly active in any launch: the
  test gap that hides out-of-bounds bugs ("always full": no launch exercised a partial tail).

Accesses made inside ``@triton.jit`` helpers are attributed to the helper's line (the trace's rule), outside the
kernel function: they are counted in ``helper_events`` only. The rules and limits: docs/coverage.md.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tilelens.errors import UsageError
from tilelens.store.files.lanes import column_array

if TYPE_CHECKING:
    from tilelens.store.read.coverage_rows import CoverageLaunch
    from tilelens.store.read.query import HistoryQuery
    from tilelens.store.read.results import KernelInfo

_MEMORY_OPS = {"load": 1, "store": 2}  # call name -> positional index of its mask
_ATOMIC_MASK = 2  # tl.atomic_add(pointer, val, mask, ...) and the other atomics but cas
_TRACE_COLUMNS = ("line", "lanes", "active")


@dataclass
class LineCoverage:
    """One source line of a kernel function; ``statement``: the first line of the statement it belongs to."""

    line: int
    source: str
    statement: int | None  # None: no executable statement (blank, comment, def, decorator, docstring, else:)
    executed: bool | None  # None: not a statement line, or unknown (no line data)
    launches: int = 0  # launches that ran its statement
    tests: int = 0  # distinct tests among them
    events: int = 0  # memory events at this line
    lanes: int = 0
    active_lanes: int = 0
    masked_lanes: int = 0
    partial_events: int = 0  # events with 0 < active < lanes
    full_events: int = 0  # events with every lane active
    masked: bool = False  # a masked access: the source gives it a mask, or lanes were masked off

    @property
    def status(self) -> str | None:
        """executed, missing, unknown, or None for a line that is no statement."""
        if self.statement is None:
            return None
        return "unknown" if self.executed is None else "executed" if self.executed else "missing"

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status
        return out


@dataclass
class BoundaryGap:
    """A masked access that ran but was never partly active: every event full (or wholly masked off)."""

    line: int
    source: str
    events: int
    full_events: int
    empty_events: int
    launches: int

    @property
    def message(self) -> str:
        if self.empty_events == 0:
            how = "was always full"
        elif self.full_events == 0:
            how = "was never true"
        else:
            how = "was always full or empty"
        return f"the mask at line {self.line} {how}: no launch exercised a partial tail"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message}


@dataclass
class KernelCoverage:
    """Coverage of one kernel version over the selected launches."""

    kernel_id: int
    name: str
    file: str
    def_line: int
    source_sha256: str
    launches: int
    line_launches: int  # launches whose executed lines were captured
    tests: int
    statements: int
    executed_statements: int | None  # None: unknown (no line data and no memory events)
    missing: list[int] | None  # first lines of statements never executed; None: unknown (no line data)
    lines: list[LineCoverage]
    boundary: list[BoundaryGap]
    helper_events: int = 0  # memory events attributed to lines outside the function (its helpers)
    notes: list[str] = field(default_factory=list)

    @property
    def percent(self) -> float | None:
        """Executed statements in percent; None without line data (memory lines alone give only a floor)."""
        if self.missing is None or self.executed_statements is None or self.statements == 0:
            return None
        return 100.0 * self.executed_statements / self.statements

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("lines", "boundary")}
        out["percent"] = None if self.percent is None else round(self.percent, 1)
        out["lines"] = [line.as_dict() for line in self.lines]
        out["boundary"] = [gap.as_dict() for gap in self.boundary]
        return out


@dataclass
class CoverageReport:
    """Every kernel version the selected launches ran, in order of first launch."""

    kernels: list[KernelCoverage]
    launches: int
    filters: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "filters": self.filters,
            "launches": self.launches,
            "kernels": [k.as_dict() for k in self.kernels],
        }


def coverage(
    query: HistoryQuery,
    *,
    run: int | None = None,
    test: str | None = None,
    kernel: str | None = None,
    runs: Sequence[int] | None = None,
) -> CoverageReport:
    """Coverage of the launches the filters keep (all of the history's without any; ``runs``: of these runs
    only). Raises UsageError when none is kept, saying which filter found nothing."""
    launches = query.coverage_launches(kernel=kernel, run=run, test=test, runs=runs)
    filters = {"run": run, "test": test, "kernel": kernel}
    if not launches:
        given = ", ".join(f"--{k} {v}" for k, v in filters.items() if v is not None)
        raise UsageError(f"no launches to cover{' for ' + given if given else ' in the history'}")
    by_kernel: dict[int, list[CoverageLaunch]] = {}
    for launch in launches:
        by_kernel.setdefault(launch.kernel_id, []).append(launch)
    infos = query.kernel_infos(list(by_kernel))
    kernels = [kernel_coverage(infos[k], group, _memory_of(query, group)) for k, group in by_kernel.items()]
    return CoverageReport(kernels, len(launches), filters)


@dataclass
class _LineMemory:
    events: int = 0
    lanes: int = 0
    active: int = 0
    partial: int = 0
    full: int = 0
    empty: int = 0
    launches: set[int] = field(default_factory=set)


def _memory_of(query: HistoryQuery, launches: Sequence[CoverageLaunch]) -> dict[int, dict[int, _LineMemory]]:
    """Per launch with a trace: per line, its memory events' counts. A trace shared by many launches (one
    kernel on one shape) is read and summed once; the launches share its (read-only) sums."""
    by_blob: dict[str, dict[int, _LineMemory]] = {}
    out: dict[int, dict[int, _LineMemory]] = {}
    for launch in launches:
        blob = launch.trace_blob
        if blob is None:
            continue
        if blob not in by_blob:
            table = query.trace_table(blob, _TRACE_COLUMNS)
            line, lanes, active = (column_array(table, name, np.int64) for name in _TRACE_COLUMNS)
            by_blob[blob] = line_memory(line, lanes, active)
        out[launch.id] = by_blob[blob]
    return out


def line_memory(line: np.ndarray, lanes: np.ndarray, active: np.ndarray) -> dict[int, _LineMemory]:
    """One trace's events summed per line."""
    if line.size == 0:
        return {}
    keys, inverse = np.unique(line, return_inverse=True)
    n = keys.size

    def total(values: np.ndarray) -> list[int]:
        return np.bincount(inverse, weights=values, minlength=n).astype(np.int64).tolist()

    partial = (active > 0) & (active < lanes)
    sums = zip(
        total(np.ones_like(line)),
        total(lanes),
        total(active),
        total(partial),
        total(active == lanes),
        total(active == 0),
    )
    return {int(k): _LineMemory(*s) for k, s in zip(keys.tolist(), sums)}


def kernel_coverage(
    info: KernelInfo, launches: Sequence[CoverageLaunch], memory: dict[int, dict[int, _LineMemory]]
) -> KernelCoverage:
    """One kernel version's coverage from its launches and their per-line memory events."""
    source_lines = info.source.splitlines()
    first, last = info.def_line, info.def_line + len(source_lines) - 1
    statements, masked_lines = parse_statements(info.source, info.def_line)
    owner = {line: start for start, own in statements.items() for line in own}

    # Per launch: the lines it ran (captured, and those with memory events) and its memory events at the
    # function's lines. The trace's lines name no file: an event outside the function's lines, or (where the
    # launch's lines were captured) at a line the function did not run, was made by a helper.
    ran: dict[int, set[int]] = {}
    own_memory: dict[int, dict[int, _LineMemory]] = {}
    helper_events = 0
    for launch in launches:
        lines = set(launch.lines or ())
        own_memory[launch.id] = {}
        for line, m in memory.get(launch.id, {}).items():
            if first <= line <= last and (launch.lines is None or line in lines):
                own_memory[launch.id][line] = m
            else:
                helper_events += m.events
        ran[launch.id] = lines | set(own_memory[launch.id])
    with_lines = [launch for launch in launches if launch.lines is not None]
    known = bool(with_lines)

    per_statement: dict[int, list[CoverageLaunch]] = {start: [] for start in statements}
    for launch in launches:
        lines = ran[launch.id]
        for start, own in statements.items():
            if lines.intersection(own):
                per_statement[start].append(launch)

    mem: dict[int, _LineMemory] = {}
    for launch_id, lines_mem in own_memory.items():
        for line, m in lines_mem.items():
            total = mem.setdefault(line, _LineMemory())
            total.events += m.events
            total.lanes += m.lanes
            total.active += m.active
            total.partial += m.partial
            total.full += m.full
            total.empty += m.empty
            total.launches.add(launch_id)

    rows: list[LineCoverage] = []
    for i, text in enumerate(source_lines):
        line = first + i
        stmt = owner.get(line)
        executed: bool | None = None
        n_launches = n_tests = 0
        if stmt is not None:
            who = per_statement[stmt]
            n_launches = len(who)
            n_tests = len({w.test_nodeid for w in who if w.test_nodeid is not None})
            executed = True if who else (False if known else None)
        m = mem.get(line, _LineMemory())
        rows.append(
            LineCoverage(
                line=line,
                source=text,
                statement=stmt,
                executed=executed,
                launches=n_launches,
                tests=n_tests,
                events=m.events,
                lanes=m.lanes,
                active_lanes=m.active,
                masked_lanes=m.lanes - m.active,
                partial_events=m.partial,
                full_events=m.full,
                masked=line in masked_lines or m.lanes > m.active,
            )
        )

    executed_starts = [s for s, who in per_statement.items() if who]
    missing = sorted(set(statements) - set(executed_starts)) if known else None
    executed_count = len(executed_starts) if known or executed_starts else None
    boundary = [
        BoundaryGap(
            r.line, r.source, r.events, r.full_events, r.events - r.full_events, len(mem[r.line].launches)
        )
        for r in rows
        if r.masked and r.events and not r.partial_events
    ]
    notes = []
    without = len(launches) - len(with_lines)
    if without:
        compiled = sum(1 for launch in launches if launch.lines is None and launch.backend == "compiled")
        why = f"{compiled} compiled" if compiled == without else "recorded without --coverage or compiled"
        notes.append(
            f"{without} of {len(launches)} launches have no line data ({why}): only their memory lines count"
        )
    if helper_events:
        notes.append(f"{helper_events} memory events at lines outside the kernel function (its helpers)")
    return KernelCoverage(
        kernel_id=info.id,
        name=info.name,
        file=info.file,
        def_line=info.def_line,
        source_sha256=info.source_sha256,
        launches=len(launches),
        line_launches=len(with_lines),
        tests=len({launch.test_nodeid for launch in launches if launch.test_nodeid is not None}),
        statements=len(statements),
        executed_statements=executed_count,
        missing=missing,
        lines=rows,
        boundary=boundary,
        helper_events=helper_events,
        notes=notes,
    )


def parse_statements(source: str, def_line: int) -> tuple[dict[int, list[int]], set[int]]:
    """The kernel function's executable statements (first line -> its own lines) and the lines of its masked
    memory accesses, in absolute line numbers. Empty for a source that does not parse as a function."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return {}, set()
    fn = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if fn is None:
        return {}, set()
    shift = def_line - fn.lineno
    body = list(fn.body)
    if body and _is_docstring(body[0]):
        body = body[1:]
    statements: dict[int, list[int]] = {}
    for node in _walk_statements(body):
        inner = [child.lineno for child in _children(node)]
        end = (min(inner) - 1) if inner else (node.end_lineno or node.lineno)
        statements[node.lineno + shift] = list(range(node.lineno + shift, max(end, node.lineno) + shift + 1))
    masked = {n.lineno + shift for n in ast.walk(fn) if isinstance(n, ast.Call) and _masked_access(n)}
    return statements, masked


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _children(node: ast.stmt) -> list[ast.stmt]:
    """The statements directly inside ``node`` (bodies, else branches, handlers' bodies)."""
    out: list[ast.stmt] = []
    for name in ("body", "orelse", "finalbody"):
        value = getattr(node, name, None)
        if isinstance(value, list):
            out += [v for v in value if isinstance(v, ast.stmt)]
    for handler in getattr(node, "handlers", ()) or ():
        out += list(handler.body)
    for case in getattr(node, "cases", ()) or ():
        out += list(case.body)
    return out


def _walk_statements(body: Iterable[ast.stmt]) -> Iterable[ast.stmt]:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node  # a nested definition runs as one statement; its body is not the kernel's
            continue
        yield node
        yield from _walk_statements(_children(node))


def _masked_access(call: ast.Call) -> bool:
    """Whether ``call`` is a load, store or atomic given a mask (or boundary_check)."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name in _MEMORY_OPS:
        position = _MEMORY_OPS[name]
    elif name.startswith("atomic_") and name != "atomic_cas":
        position = _ATOMIC_MASK
    else:
        return False
    for kw in call.keywords:
        if kw.arg in ("mask", "boundary_check") and not (
            isinstance(kw.value, ast.Constant) and kw.value.value in (None, ())
        ):
            return True
    if len(call.args) > position:
        arg = call.args[position]
        return not (isinstance(arg, ast.Constant) and arg.value is None)
    return False
