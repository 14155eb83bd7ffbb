"""The memory a launch's arguments span, in host byte addresses: each view (``ArgSpan``), the views sorted for
address -> argument lookup (``SpanTable``), and the storages behind them (``StorageTable``).

What a launch is, read off its arguments before anything runs: the interpreter's access hooks
(``tilelens.core.engine``) attribute every memory event through these, and replay rebuilds the same spans.
Invariant: ``SpanTable.attribute`` counts a lane in bounds only when it lies in the view of the argument its
offset is relative to; ``StorageTable.stray`` reports exactly the lanes with a byte outside every storage.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

import numpy as np


class StorageTable:
    """Byte intervals of the arguments' storages (merged where they overlap), for the stray-lane check.

    The check runs before every interpreted memory operation, so its common case costs two reductions and a
    comparison: a block whose lowest and highest byte lie in one storage has no stray lane. Only blocks that
    cross a storage's edge (masked tails do) take the vectorised per-lane path.
    """

    def __init__(self, intervals: Iterable[tuple[int, int]]) -> None:
        merged: list[list[int]] = []
        for start, end in sorted((int(s), int(e)) for s, e in intervals if e > s):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]
        self.np_starts = np.array(self.starts, dtype=np.uint64)
        self.np_ends = np.array(self.ends, dtype=np.uint64)
        self._hit = (0, 0)  # the interval the last block fell in: consecutive accesses mostly share one

    def stray(self, addrs: np.ndarray, mask: np.ndarray | None, elem_bytes: int) -> np.ndarray | None:
        """Active lanes (``mask``; None: all) with bytes outside every storage, or None when there are none."""
        if addrs.size == 0:
            return None
        lo = int(addrs.min())
        hi = int(addrs.max()) + elem_bytes
        start, end = self._hit
        if start <= lo and hi <= end:
            return None
        i = bisect.bisect_right(self.starts, lo) - 1
        if i >= 0 and hi <= self.ends[i]:
            self._hit = (self.starts[i], self.ends[i])
            return None
        outside = self.outside(addrs, elem_bytes)
        if mask is not None:
            outside &= np.broadcast_to(np.asarray(mask, dtype=bool), outside.shape)
        return outside if outside.any() else None

    def outside(self, addrs: np.ndarray, elem_bytes: int) -> np.ndarray:
        """Per lane: do the lane's ``elem_bytes`` bytes fall outside every storage?"""
        addrs = np.asarray(addrs).astype(np.uint64, copy=False)
        if not self.starts:
            return np.ones(addrs.shape, dtype=bool)
        idx = np.searchsorted(self.np_starts, addrs, side="right").astype(np.int64) - 1
        inside = idx >= 0
        safe = np.where(inside, idx, 0)
        # ``addr <= end - elem_bytes``, not ``addr + elem_bytes <= end``: wild addresses must not wrap around.
        inside &= addrs <= self.np_ends[safe] - np.uint64(elem_bytes)
        return ~inside

    def distance(self, addrs: np.ndarray) -> np.ndarray:
        """Per address: bytes to the nearest storage (0 inside one); for the bounded stray reads."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        if not self.starts:
            return np.full(addrs.shape, np.iinfo(np.int64).max, dtype=np.float64)
        a = addrs.astype(np.float64)
        idx = np.searchsorted(self.np_starts, addrs, side="right").astype(np.int64) - 1
        below = np.where(idx >= 0, a - self.np_ends[np.maximum(idx, 0)].astype(np.float64), np.inf)
        nxt = np.minimum(idx + 1, len(self.starts) - 1)
        above = np.where(idx + 1 < len(self.starts), self.np_starts[nxt].astype(np.float64) - a, np.inf)
        return cast("np.ndarray", np.maximum(np.minimum(np.maximum(below, 0.0), np.maximum(above, 0.0)), 0.0))


@dataclass(frozen=True)
class ArgSpan:
    """Byte span of one tensor argument as the interpreter sees it (host addresses)."""

    position: int
    start: int
    end: int
    elem_bytes: int
    # The whole storage behind the view (defaults to the view): which argument an event belongs to when none
    # of its active lanes lies in any view, e.g. a load entirely before a slice but inside its parent tensor.
    storage_start: int = -1
    storage_end: int = -1

    def in_storage(self, addr: int) -> bool:
        if self.storage_start < 0:
            return self.start <= addr < self.end
        return self.storage_start <= addr < self.storage_end


class SpanTable:
    """Sorted argument spans for address -> argument lookup.

    Overlapping spans (aliased views) are kept and ``aliased`` lists the overlapping pairs so the launch can
    flag them; :meth:`attribute` decides which argument an event belongs to. ``storage``
    holds the arguments' whole storages, for the stray-lane guard; None when they are unknown (nothing is
    guarded then, as in the stock interpreter).
    """

    def __init__(self, spans: list[ArgSpan], storage: StorageTable | None = None) -> None:
        self.storage = storage
        self.spans = sorted(spans, key=lambda s: (s.start, s.position))
        self.starts = [s.start for s in self.spans]
        self.np_starts = np.array(self.starts, dtype=np.uint64)
        self.np_ends = np.array([s.end for s in self.spans], dtype=np.uint64)
        self.aliased: list[tuple[int, int]] = []
        for i, a in enumerate(self.spans):
            for b in self.spans[i + 1 :]:
                if b.start >= a.end:
                    break
                self.aliased.append((min(a.position, b.position), max(a.position, b.position)))

    def find(self, addr: int) -> ArgSpan | None:
        """The argument containing ``addr``, else the nearest one below it (for offsets past an end)."""
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0:
            return self.spans[0] if self.spans else None
        if self.aliased:
            for span in self.spans[: i + 1]:
                if span.start <= addr < span.end:
                    return span
        return self.spans[i]

    def containing(self, lo: int, hi: int) -> ArgSpan | None:
        """Among overlapping arguments, the one holding all of [lo, hi] that starts last (the most specific view)."""
        best = None
        for span in self.spans:
            if span.start <= lo and hi <= span.end and (best is None or span.start > best.start):
                best = span
        return best

    def attribute(
        self, addrs: np.ndarray, active: np.ndarray | None
    ) -> tuple[ArgSpan | None, np.ndarray, dict[int, int]]:
        """The argument an event belongs to, its active lanes outside that argument's view, and the lanes hit.

        The interpreter does not say which argument a pointer was derived from, so the event goes to the
        argument whose view holds the most active lanes (ties: the lower parameter position), whatever lies
        around it in memory. Where no active lane lies in any view, it goes to the argument whose storage
        holds the first active lane, else to the nearest argument below it. Every active lane outside the
        chosen view is out of bounds of it, including lanes inside another argument's view (a cross-tensor
        access: the third result counts them per position of the argument they hit). Invariant: a lane
        counted in bounds lies in the view of the argument its offset is relative to.
        """
        act = np.ones(addrs.shape, dtype=bool) if active is None else active
        best: ArgSpan | None = None
        best_inside: np.ndarray | None = None
        best_n = 0
        insides: list[tuple[ArgSpan, np.ndarray]] = []
        for span in self.spans:
            inside = (addrs >= np.uint64(span.start)) & (addrs < np.uint64(span.end))
            insides.append((span, inside))
            n = int(np.count_nonzero(inside & act))
            if n and (n > best_n or (n == best_n and best is not None and span.position < best.position)):
                best, best_inside, best_n = span, inside, n
        if best is None:
            live = addrs[act]
            if live.size:
                first = int(live.flat[0])
                owners = [s for s in self.spans if s.in_storage(first)]
                best = min(owners, key=lambda s: s.position) if owners else self.find(first)
            outside = act.copy()
        else:
            assert best_inside is not None
            outside = act & ~best_inside
        hits: dict[int, int] = {}
        if outside.any():
            for span, inside in insides:
                if span is best or (best is not None and span.position == best.position):
                    continue
                n = int(np.count_nonzero(outside & inside))
                if n:
                    hits[span.position] = hits.get(span.position, 0) + n
        return best, outside, hits

    def outside(self, addrs: np.ndarray) -> np.ndarray:
        """Boolean array: which addresses fall outside every argument."""
        if not self.spans:
            return np.ones(addrs.shape, dtype=bool)
        idx = np.searchsorted(self.np_starts, addrs, side="right") - 1
        inside = idx >= 0
        safe = np.where(inside, idx, 0)
        inside &= addrs < self.np_ends[safe]
        if self.aliased:  # a lane past one span may still be inside an earlier, longer one
            for s, e in zip(self.np_starts, self.np_ends):
                inside |= (addrs >= s) & (addrs < e)
        return ~inside
