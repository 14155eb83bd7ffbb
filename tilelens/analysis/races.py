"""Conflicting accesses of different programs to one element, found with sorts over every lane at once.

Per argument, the lanes (active, in bounds, not a lock's own take or release) are reduced to distinct tuples
(element, program, kind, lock held, line). Elements that only one program touches, or that no program writes,
are dropped first: in a clean kernel that is every element, and the check ends there. For the rest, an access
``a`` of program ``p`` under lock ``g`` conflicts with the accesses ``b`` of the other side when some ``b`` is by
another program and not under the same lock; counted without pairing lanes up::

    conflicting(b) = N(e) - N(e, p) - [g held] * (N(e, g) - N(e, p, g))

where ``N`` counts the other side's distinct tuples on element ``e`` (of program ``p``, under lock ``g``). The
pairs under one same lock are the synchronized ones: ``[g held] * (N(e, g) - N(e, p, g))``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tilelens.analysis.events import ATOMIC, LOAD, STORE

WRITE_WRITE, READ_WRITE, MIXED_ATOMIC = "write-write", "read-write", "mixed-atomic"
# (kind, which lanes make side a, which make side b)
PAIRS: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = (
    (WRITE_WRITE, (STORE,), (STORE,)),
    (READ_WRITE, (LOAD,), (STORE,)),
    (MIXED_ATOMIC, (LOAD, STORE), (ATOMIC,)),
)
_KEY_LIMIT = 1 << 62


@dataclass
class Lanes:
    """The lanes of one argument: element offset, program, kind, lock held (-1: none) and source line."""

    offset: np.ndarray
    program: np.ndarray
    kind: np.ndarray
    guard: np.ndarray
    line: np.ndarray

    @classmethod
    def concat(cls, parts: list[Lanes]) -> Lanes:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))

    def take(self, index: np.ndarray) -> Lanes:
        return Lanes(*(getattr(self, f)[index] for f in _FIELDS))

    @property
    def size(self) -> int:
        return int(self.offset.size)


_FIELDS = ("offset", "program", "kind", "guard", "line")


@dataclass
class Conflict:
    """Side a's accesses on ``lines[0]`` meeting side b's on ``lines[1]``, on ``elements`` (sorted offsets).

    ``synchronized``: these pairs ran under one same lock (``locks``, ids of :class:`tilelens.analysis.locks
    .Lock`); otherwise they are a finding.
    """

    kind: str
    arg: int
    lines: tuple[int, int]
    elements: np.ndarray
    programs: tuple[np.ndarray, np.ndarray]
    synchronized: bool = False
    locks: tuple[int, ...] = ()


def distinct(lanes: Lanes) -> Lanes:
    """One lane per distinct (element, program, kind, lock, line), sorted by element then program."""
    if lanes.size == 0:
        return lanes
    order = np.lexsort((lanes.line, lanes.guard, lanes.kind, lanes.program, lanes.offset))
    s = lanes.take(order)
    new = np.zeros(s.size, dtype=bool)
    new[0] = True
    for f in _FIELDS:
        values = getattr(s, f)
        new[1:] |= values[1:] != values[:-1]
    return s.take(np.flatnonzero(new))


def contested(lanes: Lanes) -> Lanes:
    """The lanes of elements that two programs touch and some program writes, in O(lanes): each element gets
    one of its programs (the last assignment wins); a lane of any other program marks the element shared."""
    if lanes.size == 0:
        return lanes
    low = int(lanes.offset.min())
    span = int(lanes.offset.max()) - low + 1
    if span <= max(4 * lanes.size, 1 << 16):  # offsets dense enough to index by
        e = lanes.offset - low
    else:
        _, e = np.unique(lanes.offset, return_inverse=True)
        span = int(e.max()) + 1
    owner = np.full(span, -1, dtype=np.int64)
    owner[e] = lanes.program
    shared = np.zeros(span, dtype=bool)
    shared[e[lanes.program != owner[e]]] = True
    written = np.zeros(span, dtype=bool)
    written[e[lanes.kind != LOAD]] = True
    return lanes.take(np.flatnonzero(shared[e] & written[e]))


def conflicts(arg: int, lanes: Lanes) -> Iterator[Conflict]:
    """Every conflict among ``lanes`` (one argument's), grouped by (kind, side a's line, side b's line)."""
    lanes = distinct(contested(lanes))
    if lanes.size == 0:
        return
    # Dense numbers keep composite keys small: element rank, program rank, lock rank (0: none).
    elements, e = np.unique(lanes.offset, return_inverse=True)
    _, p = np.unique(lanes.program, return_inverse=True)
    locks, g = np.unique(lanes.guard, return_inverse=True)
    g = g + (1 if locks[0] >= 0 else 0)  # 0 stands for "no lock"
    ranked = Lanes(e.astype(np.int64), p.astype(np.int64), lanes.kind, g.astype(np.int64), lanes.line)
    sizes = (int(p.max()) + 1, int(g.max()) + 1)
    lock_of = np.r_[-1, locks] if locks[0] >= 0 else locks
    numbers = np.unique(lanes.program)  # program rank -> program number
    for kind, a_kinds, b_kinds in PAIRS:
        a = ranked.take(np.flatnonzero(np.isin(ranked.kind, a_kinds)))
        b = ranked.take(np.flatnonzero(np.isin(ranked.kind, b_kinds)))
        if a.size == 0 or b.size == 0:
            continue
        for b_line in np.unique(b.line).tolist():
            side_b = b.take(np.flatnonzero(b.line == b_line))
            racing, synced = _against(a, side_b, sizes)
            for a_line in np.unique(a.line[racing | synced]).tolist():
                if kind == WRITE_WRITE and a_line > b_line:
                    continue  # the same pairs as (b_line, a_line)
                on_line = a.line == a_line
                for mask, is_sync in ((racing & on_line, False), (synced & on_line & ~racing, True)):
                    if not mask.any():
                        continue
                    hit = np.unique(a.offset[mask])
                    b_programs = side_b.program[np.isin(side_b.offset, hit)]
                    yield Conflict(
                        kind=kind,
                        arg=arg,
                        lines=(int(a_line), int(b_line)),
                        elements=elements[hit],
                        programs=(numbers[np.unique(a.program[mask])], numbers[np.unique(b_programs)]),
                        synchronized=is_sync,
                        locks=tuple(int(lock_of[v]) for v in np.unique(a.guard[mask])) if is_sync else (),
                    )


def _against(a: Lanes, b: Lanes, sizes: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Per lane of ``a``: whether some lane of ``b`` conflicts with it, and whether one is synchronized with it.

    Elements are independent, so they are taken in ranges small enough for the composite keys to fit int64.
    """
    n_prog, n_lock = sizes
    racing = np.zeros(a.size, dtype=bool)
    synced = np.zeros(a.size, dtype=bool)
    step = max(1, _KEY_LIMIT // (n_prog * n_lock))
    top = int(max(a.offset.max(), b.offset.max())) + 1
    for start in range(0, top, step):
        ia = np.flatnonzero((a.offset >= start) & (a.offset < start + step))
        ib = np.flatnonzero((b.offset >= start) & (b.offset < start + step))
        if ia.size == 0 or ib.size == 0:
            continue
        ea, eb = a.offset[ia] - start, b.offset[ib] - start
        tuples = np.unique((eb * n_prog + b.program[ib]) * n_lock + b.guard[ib])
        te, rest = np.divmod(tuples, n_prog * n_lock)
        tp, tg = np.divmod(rest, n_lock)
        n_e = _count(te, ea)
        n_ep = _count(te * n_prog + tp, ea * n_prog + a.program[ia])
        n_eg = _count(te * n_lock + tg, ea * n_lock + a.guard[ia])
        n_epg = _count(tuples, (ea * n_prog + a.program[ia]) * n_lock + a.guard[ia])
        same_lock = np.where(a.guard[ia] > 0, n_eg - n_epg, 0)
        racing[ia] = n_e - n_ep - same_lock > 0
        synced[ia] = same_lock > 0
    return racing, synced


def _count(keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """How many of ``keys`` equal each query."""
    values, counts = np.unique(keys, return_counts=True)
    at = np.minimum(np.searchsorted(values, queries), values.size - 1)
    return np.where(values[at] == queries, counts[at], 0)
