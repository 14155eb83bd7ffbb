"""Spin locks in a trace: which events of a program ran while it held a lock, and on which lock element.

The rule (docs/check.md): a lock is one element of an argument. A program *takes* it with a single-lane
``atomic_cas`` or ``atomic_xchg`` on that element and *releases* it with a later single-lane ``atomic_xchg`` or
plain store on the same element, by event order within the program. The events strictly between the two are
guarded by that lock; with locks nested, by the innermost. A take never released is no lock (the layer-norm
tutorial's ``atomic_xchg(Count, 1)`` flag is taken once and never given back), and the take and release events
themselves are the lock's protocol, not accesses to check.

The trace keeps no compared or returned value of a cas or xchg, so the rule sees the shape of the accesses
only: a program that sets a flag with an xchg and later clears it looks like one taking and releasing a lock.
Triton's interpreter runs programs one after another, so a spin loop always ends in the trace, after one try.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilelens.analysis.events import STORE, Events


@dataclass
class Lock:
    """One lock element and where programs took it."""

    arg: int
    offset: int
    take_lines: set[int] = field(default_factory=set)
    programs: set[int] = field(default_factory=set)


@dataclass
class Guards:
    """Per event: the innermost lock held (an index into ``locks``, -1 for none) and whether the event is
    itself a take or release of a lock."""

    guard: np.ndarray
    protocol: np.ndarray
    locks: list[Lock]


def find_guards(ev: Events) -> Guards:
    n = ev.count
    guard = np.full(n, -1, dtype=np.int64)
    protocol = np.zeros(n, dtype=bool)
    single = (ev.active == 1) & (ev.oob == 0) & (ev.arg >= 0)
    cas, xchg = ev.is_op("atomic_cas"), ev.is_op("atomic_xchg")
    takers = (cas | xchg) & single
    if not takers.any():
        return Guards(guard, protocol, [])
    candidates = (
        single
        & (cas | xchg | (ev.kind == STORE))
        & np.isin(ev.arg, np.unique(ev.arg[takers]))
        & np.isin(ev.program, np.unique(ev.program[takers]))
    )
    rows = np.flatnonzero(candidates)
    rows = rows[np.lexsort((ev.event[rows], ev.program[rows]))]
    offsets = _single_offsets(ev, rows)

    locks: list[Lock] = []
    ids: dict[tuple[int, int], int] = {}
    regions: list[tuple[int, int, int, int]] = []  # program, take event, release event, lock id
    held: dict[tuple[int, int], int] = {}  # lock element -> the row that took it (this program)
    program = -1
    for row, offset in zip(rows.tolist(), offsets.tolist()):
        if ev.program[row] != program:
            program, held = int(ev.program[row]), {}
        key = (int(ev.arg[row]), int(offset))
        taken = held.get(key)
        if taken is None:
            if cas[row] or xchg[row]:
                held[key] = row
            continue
        if cas[row]:  # another try at a lock this program holds: still held
            continue
        del held[key]
        lock_id = ids.setdefault(key, len(ids))
        if lock_id == len(locks):
            locks.append(Lock(*key))
        locks[lock_id].take_lines.add(int(ev.line[taken]))
        locks[lock_id].programs.add(program)
        protocol[[taken, row]] = True
        regions.append((program, int(ev.event[taken]), int(ev.event[row]), lock_id))
    _mark(ev, guard, regions)
    return Guards(guard, protocol, locks)


def _single_offsets(ev: Events, rows: np.ndarray) -> np.ndarray:
    """The element offset of the one active lane of each of ``rows``."""
    parts = [chunk.offset[chunk.active] for chunk in ev.decoder().chunks_of(rows)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _mark(ev: Events, guard: np.ndarray, regions: list[tuple[int, int, int, int]]) -> None:
    """Give the events inside each region its lock; regions in take order, so an inner lock wins."""
    if not regions:
        return
    span = int(ev.event.max()) + 2
    key = ev.program * span + ev.event
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    for program, take, release, lock_id in sorted(regions, key=lambda r: (r[0], r[1])):
        lo = np.searchsorted(ordered, program * span + take + 1, side="left")
        hi = np.searchsorted(ordered, program * span + release, side="left")
        guard[order[lo:hi]] = lock_id
