"""The rows ``tilelens coverage`` works on: per selected launch, its kernel version, test, executed lines and
trace; per kernel version, its source. Plain SQL over ``launches`` and ``kernels``; the computation is in
:mod:`tilelens.analysis.coverage`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tilelens.store.read.filters import Filter, in_list
from tilelens.store.read.results import KernelInfo, decode_json

Rows = Callable[[str, dict[str, Any]], list[tuple[Any, ...]]]

# The launch columns coverage reads: executed_lines is NULL where the history predates 0016 (read as unknown).
_SELECT = (
    "SELECT l.id, l.kernel_id, l.test_nodeid, l.backend, l.trace_blob, {lines} "
    "FROM launches l {where} ORDER BY l.id"
)


@dataclass(frozen=True)
class CoverageLaunch:
    """One launch as coverage sees it; ``lines`` None: its executed lines were not captured."""

    id: int
    kernel_id: int
    test_nodeid: str | None
    backend: str
    trace_blob: str | None
    lines: tuple[int, ...] | None


def coverage_launches(
    rows: Rows, f: Filter, runs: Sequence[int] | None, has_lines: bool
) -> list[CoverageLaunch]:
    """The program's launches (no autotune trials) the filter ``f`` over ``launches l`` keeps, oldest first;
    ``runs``: of these runs only (a run and its child runs)."""
    if runs is not None and not runs:
        return []
    f.add("l.role = 'launch'")
    if runs is not None:
        marks, params = in_list(runs, "r")
        f.add(f"l.run_id IN ({marks})", **params)
    sql = _SELECT.format(lines="l.executed_lines" if has_lines else "NULL", where=f.sql())
    out = []
    for r in rows(sql, f.params):
        lines = decode_json(r[5])
        out.append(
            CoverageLaunch(
                id=int(r[0]),
                kernel_id=int(r[1]),
                test_nodeid=r[2],
                backend=str(r[3]),
                trace_blob=r[4],
                lines=tuple(int(v) for v in lines) if isinstance(lines, list) else None,
            )
        )
    return out


def kernel_infos(rows: Rows, ids: Sequence[int]) -> dict[int, KernelInfo]:
    """The kernel versions ``ids``, with their sources."""
    if not ids:
        return {}
    marks, params = in_list(ids, "k")
    sql = (
        "SELECT id, module, qualname, file, def_line, source_sha256, source FROM kernels "
        f"WHERE id IN ({marks}) ORDER BY id"
    )
    found = rows(sql, params)
    return {
        int(r[0]): KernelInfo(
            id=int(r[0]),
            module=r[1],
            qualname=r[2],
            file=r[3],
            def_line=int(r[4]),
            cache_key=None,
            source_sha256=r[5],
            source=r[6],
        )
        for r in found
    }
