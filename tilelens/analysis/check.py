"""``tilelens check``: races, hazards and out-of-bounds lanes of stored launches, from their access traces.

Per launch, the trace's lanes are grouped per argument and element (:mod:`tilelens.analysis.races`), with the
locks programs held (:mod:`tilelens.analysis.locks`); conflicts come out grouped by (kind, argument, lines), so a
racing block is one finding. Out-of-bounds lanes are grouped the same way, by (argument, line, operation). The
rules and their limits: docs/check.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from tilelens.analysis.events import LOAD, Events
from tilelens.analysis.findings import (
    FINDING_KINDS,
    OUT_OF_BOUNDS,
    SAMPLE,
    Elements,
    Finding,
    LaunchCheck,
    Side,
    Synchronized,
)
from tilelens.analysis.locks import Guards, find_guards
from tilelens.analysis.races import PAIRS, Conflict, Lanes, conflicts, distinct
from tilelens.errors import NoTraceError
from tilelens.store.read.results import kernel_line

FOLD_LANES = 1 << 24  # lanes of one argument kept before repeated ones are folded together

if TYPE_CHECKING:
    import pyarrow as pa

    from tilelens.store.read.query import HistoryQuery
    from tilelens.store.read.results import ArgumentInfo, KernelInfo


def check_launches(query: HistoryQuery, launch_ids: Iterable[int]) -> list[LaunchCheck]:
    """Check each launch; one without an access trace comes back unchecked, saying why."""
    return [check_launch(query, launch_id) for launch_id in launch_ids]


def check_launch(query: HistoryQuery, launch_id: int) -> LaunchCheck:
    detail = query.launch(launch_id, oob_events=0)
    launch = detail.launch
    name = detail.kernel.name
    try:
        trace = query.trace(launch_id)
    except NoTraceError as exc:
        return LaunchCheck(launch_id, name, launch.grid, checked=False, reason=str(exc))
    findings, synchronized = check_trace(trace, launch.grid, detail.args, detail.kernel)
    return LaunchCheck(launch_id, name, launch.grid, True, None, findings, synchronized)


def check_trace(
    trace: pa.Table,
    grid: tuple[int, int, int],
    args: Sequence[ArgumentInfo],
    kernel: KernelInfo,
) -> tuple[list[Finding], list[Synchronized]]:
    """The findings and the synchronized conflicts of one launch's trace."""
    if trace.num_rows == 0:
        return [], []
    ev = Events.of(trace, grid)
    guards = find_guards(ev)
    report = _Report(ev, guards, {a.position: a for a in args}, kernel)
    findings: list[Finding] = []
    synchronized: list[Synchronized] = []
    for arg, lanes in _argument_lanes(ev, guards):
        for c in conflicts(arg, lanes):
            if c.synchronized:
                synchronized.append(report.synchronized(c))
            else:
                findings.append(report.conflict(c))
    findings += report.out_of_bounds()
    order = {kind: i for i, kind in enumerate(FINDING_KINDS)}
    findings.sort(key=lambda f: (order[f.kind], f.arg, [s.line for s in f.sides]))
    synchronized.sort(key=lambda s: (order[s.kind], s.arg, [side.line for side in s.sides]))
    return findings, synchronized


def _argument_lanes(ev: Events, guards: Guards) -> Iterable[tuple[int, Lanes]]:
    """Per written argument, its lanes: active, in bounds, not a lock's take or release."""
    usable = (ev.arg >= 0) & (ev.active > 0) & ~guards.protocol
    decoder = None
    # Loads of an argument no program writes can race with nothing: their lanes are never decoded.
    for arg in np.unique(ev.arg[usable & (ev.kind != LOAD)]).tolist():
        decoder = decoder or ev.decoder()
        rows = np.flatnonzero(usable & (ev.arg == arg))
        if _apart(ev.program[rows], *decoder.spans(rows)):
            continue
        found: list[Lanes] = []
        for chunk in decoder.chunks_of(rows):
            keep = chunk.active & ~chunk.oob
            r, offset = (chunk.row, chunk.offset) if keep.all() else (chunk.row[keep], chunk.offset[keep])
            found.append(Lanes(offset, ev.program[r], ev.kind[r], guards.guard[r], ev.line[r]))
            if sum(p.size for p in found) > FOLD_LANES:  # repeated lanes folded: memory stays bounded
                found[:] = [distinct(Lanes.concat(found))]
        yield arg, Lanes.concat(found)


def _apart(program: np.ndarray, low: np.ndarray, high: np.ndarray) -> bool:
    """Whether the programs' element ranges (from their rows' lowest to highest offset) never overlap: then no
    element is touched by two programs, and the argument's lanes need no decoding (one row per program, as in
    row-wise kernels, is the common case)."""
    if program.size == 0:
        return True
    order = np.argsort(program, kind="stable")
    program, low, high = program[order], low[order], high[order]
    starts = np.flatnonzero(np.r_[True, program[1:] != program[:-1]])
    first, last = np.minimum.reduceat(low, starts), np.maximum.reduceat(high, starts)
    by_start = np.argsort(first, kind="stable")
    return bool(np.all(last[by_start][:-1] < first[by_start][1:]))


class _Report:
    """Turns conflicts and out-of-bounds events into findings: names, logical indices, source lines."""

    def __init__(self, ev: Events, guards: Guards, args: dict[int, ArgumentInfo], kernel: KernelInfo) -> None:
        self.ev, self.guards, self.args, self.kernel = ev, guards, args, kernel
        self._ops: dict[tuple[int, int, int], set[str]] | None = None

    @property
    def ops(self) -> dict[tuple[int, int, int], set[str]]:
        """(arg, line, kind) -> the operations there, for naming each side; made once a finding needs it."""
        if self._ops is None:
            ev = self.ev
            lines, n_ops = int(ev.line.max()) + 2, max(1, len(ev.op_names))
            key = (((ev.arg + 1) * lines + ev.line + 1) * 3 + ev.kind) * n_ops + ev.op
            self._ops = {}
            for k in np.unique(key).tolist():
                rest, op = divmod(k, n_ops)
                rest, kind = divmod(rest, 3)
                arg, line = divmod(rest, lines)
                self._ops.setdefault((arg - 1, line - 1, kind), set()).add(ev.op_names[op])
        return self._ops

    def _name(self, arg: int) -> str | None:
        info = self.args.get(arg)
        return info.name if info is not None else None

    def _side(self, arg: int, line: int, kinds: tuple[int, ...], programs: np.ndarray) -> Side:
        ops = sorted(set().union(*(self.ops.get((arg, line, k), set()) for k in kinds)))
        return Side(
            ops=ops,
            line=line,
            source=kernel_line(self.kernel, line),
            programs=int(programs.size),
            first_programs=self.ev.pid(programs[:SAMPLE]).tolist(),
        )

    def _sides(self, c: Conflict) -> list[Side]:
        _, a_kinds, b_kinds = next(p for p in PAIRS if p[0] == c.kind)
        return [
            self._side(c.arg, c.lines[0], a_kinds, c.programs[0]),
            self._side(c.arg, c.lines[1], b_kinds, c.programs[1]),
        ]

    def elements(self, arg: int, offsets: np.ndarray) -> Elements:
        info = self.args.get(arg)
        shape = info.shape if info is not None else None
        strides = info.strides if info is not None else None
        first = [int(v) for v in offsets[:SAMPLE]]
        last = int(offsets[-1])
        return Elements(
            count=int(offsets.size),
            first=[logical_index(v, shape, strides) for v in first],
            last=logical_index(last, shape, strides),
            first_offsets=first,
            last_offset=last,
        )

    def conflict(self, c: Conflict) -> Finding:
        info = self.args.get(c.arg)
        return Finding(
            kind=c.kind,
            arg=c.arg,
            arg_name=self._name(c.arg),
            elements=self.elements(c.arg, c.elements),
            sides=self._sides(c),
            numel=info.numel if info is not None else None,
        )

    def synchronized(self, c: Conflict) -> Synchronized:
        locks = [self.guards.locks[i] for i in c.locks]
        names = []
        for lock in locks[:SAMPLE]:
            index = self.elements(lock.arg, np.array([lock.offset])).first[0]
            where = f"[{', '.join(map(str, index))}]" if index is not None else f"+{lock.offset}"
            names.append(f"{self._name(lock.arg) or f'#{lock.arg}'}{where}")
        return Synchronized(
            kind=c.kind,
            arg=c.arg,
            arg_name=self._name(c.arg),
            elements=self.elements(c.arg, c.elements),
            sides=self._sides(c),
            locks=names,
            lock_count=len(locks),
            take_lines=sorted(set().union(*(lock.take_lines for lock in locks))),
        )

    def out_of_bounds(self) -> list[Finding]:
        """Out-of-bounds lanes as ``show`` counts them, one finding per (argument, line, operation)."""
        ev = self.ev
        rows = np.flatnonzero(ev.oob > 0)
        if rows.size == 0:
            return []
        groups: dict[tuple[int, int, int], list[int]] = {}
        for row, key in zip(rows.tolist(), zip(*(x[rows].tolist() for x in (ev.arg, ev.line, ev.op)))):
            groups.setdefault(key, []).append(row)
        out = []
        for (arg, line, op), members in sorted(groups.items()):
            picked = np.array(members, dtype=np.int64)
            offsets = np.unique(np.concatenate([c.offset[c.oob] for c in ev.decoder().chunks_of(picked)]))
            info = self.args.get(arg)
            programs = np.unique(ev.program[picked])
            side = self._side(arg, line, (), programs)
            side.ops = [ev.op_names[op]]
            out.append(
                Finding(
                    kind=OUT_OF_BOUNDS,
                    arg=arg,
                    arg_name=self._name(arg),
                    elements=self.elements(arg, offsets),
                    sides=[side],
                    numel=info.numel if info is not None else None,
                    lanes=int(ev.oob[picked].sum()),
                    events=int(picked.size),
                    dropped=int(ev.stray[picked].sum()),
                )
            )
        return out


def logical_index(
    offset: int, shape: Sequence[int] | None, strides: Sequence[int] | None
) -> list[int] | None:
    """The index of the element at ``offset`` (elements from the view's first) in a view of ``shape`` and
    ``strides``; None when no element of the view is there (outside it, or between its elements)."""
    if shape is None or strides is None or len(shape) != len(strides) or any(n <= 0 for n in shape):
        return None
    if offset < 0 or any(s < 0 for s in strides):
        return None
    index = [0] * len(shape)
    rest = offset
    for axis in sorted(range(len(shape)), key=lambda i: -strides[i]):
        if shape[axis] > 1 and strides[axis] > 0:
            index[axis] = min(rest // strides[axis], shape[axis] - 1)
            rest -= index[axis] * strides[axis]
    return index if rest == 0 else None
