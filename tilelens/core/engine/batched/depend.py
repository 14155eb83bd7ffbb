"""Whether any program of a batched run could have seen what another program of the launch wrote.

The stock interpreter runs program 0 to its end, then program 1, ...; the batched engine runs statement by
statement for all programs at once. The two agree on every value exactly when no memory location is touched
by two different programs with at least one of the touches a write (store or atomic), except where all the
touches of that location happen in one batched statement instance: there the C++ memory functions go through
the lanes in flattened order, which is program-major, the stock order (verified for atomics: lanes hitting one
address are applied one after another, each seeing the previous one's result).

Only lanes that reach memory count: active ones, not stray (never dereferenced, see ``tilelens.core.engine.bounds``).
Locations are compared at the granularity of the greatest common divisor of the element sizes, so a 4-byte
store and a 1-byte load of one of its bytes still meet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tilelens.core.engine.access import LOAD


def _touched(entry: Any) -> tuple[np.ndarray, np.ndarray]:
    """(active lanes reaching memory, addresses) of one batched entry, both shaped (B, lanes)."""
    _op, addrs, mask, _eb, _line, _values, stray = entry[:7]
    b = addrs.shape[0]
    flat = addrs.reshape(b, -1)
    act = (
        np.ones(flat.shape, dtype=bool) if mask is None else np.broadcast_to(mask, addrs.shape).reshape(b, -1)
    )
    if stray is not None:
        act = act & ~stray.reshape(b, -1)
    return act, flat


def _mixed_components(lo: np.ndarray, hi: np.ndarray, prog: np.ndarray, write: np.ndarray) -> np.ndarray:
    """Per interval: whether it lies in a run of overlapping intervals with two programs and a write."""
    order = np.argsort(lo, kind="stable")
    lo, hi, prog, write = lo[order], hi[order], prog[order], write[order]
    reach = np.maximum.accumulate(hi)
    new = np.concatenate(([True], lo[1:] >= reach[:-1]))
    comp = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    multi = np.minimum.reduceat(prog, starts) != np.maximum.reduceat(prog, starts)
    writes = np.maximum.reduceat(write.astype(np.int8), starts) > 0
    out = np.empty(order.size, dtype=bool)
    out[order] = (multi & writes)[comp]
    return out


def conflict(entries: Sequence[Any]) -> bool:
    """True when the batched run's order could differ from the per-program run's (see the module docstring)."""
    if not any(e[0] != LOAD for e in entries):
        return False
    # Per entry and program, the hull of the lanes reaching memory: disjoint hulls cannot conflict.
    touched = []
    los, his, progs, writes, owners = [], [], [], [], []
    for k, entry in enumerate(entries):
        act, addrs = _touched(entry)
        rows = np.flatnonzero(act.any(axis=1))
        if rows.size == 0:
            continue
        eb = int(entry[3])
        every_row = rows.size == act.shape[0]
        a, m = (addrs, act) if every_row else (addrs[rows], act[rows])
        if every_row and bool(m.all()):  # every lane reaches memory: plain row extremes
            lo, hi = a.min(axis=1), a.max(axis=1) + np.uint64(eb)
        else:
            lo = np.where(m, a, np.uint64(np.iinfo(np.uint64).max)).min(axis=1)
            hi = np.where(m, a, np.uint64(0)).max(axis=1) + np.uint64(eb)
        touched.append((k, act, addrs, eb, entry[0] != LOAD))
        los.append(lo)
        his.append(hi)
        progs.append(rows)
        writes.append(np.full(rows.size, entry[0] != LOAD))
        owners.append(np.full(rows.size, len(touched) - 1))
    if not touched:
        return False
    mixed = _mixed_components(
        np.concatenate(los), np.concatenate(his), np.concatenate(progs), np.concatenate(writes)
    )
    if not mixed.any():
        return False
    suspects = set(np.concatenate(owners)[mixed].tolist())
    relevant = [t for i, t in enumerate(touched) if i in suspects]
    return _exact(relevant)


def _exact(relevant: list[tuple[int, np.ndarray, np.ndarray, int, bool]]) -> bool:
    """The lane-exact check over the entries that may conflict."""
    g = 0
    for _, _, _, eb, _ in relevant:
        g = math.gcd(g, eb)
    lanes: list[tuple[np.ndarray, int]] = []  # (addresses, element bytes) per relevant entry
    progs_all, insts, writes = [], [], []
    for k, act, addrs, eb, write in relevant:
        progs, cols = np.nonzero(act)
        a = addrs[progs, cols]
        if g > 1 and bool((a % np.uint64(g)).any()):
            g = 1
        lanes.append((a, eb))
        progs_all.append(progs.astype(np.int64))
        insts.append(np.full(a.size, k, dtype=np.int64))
        writes.append(np.full(a.size, write))
    expanded = []
    for i, (a, eb) in enumerate(lanes):
        gran = a // np.uint64(g)
        n = eb // g
        if n > 1:
            gran = (gran[:, None] + np.arange(n, dtype=np.uint64)).ravel()
            progs_all[i] = np.repeat(progs_all[i], n)
            insts[i] = np.repeat(insts[i], n)
            writes[i] = np.repeat(writes[i], n)
        expanded.append(gran)
    gran = np.concatenate(expanded)
    prog = np.concatenate(progs_all)
    inst = np.concatenate(insts)
    written = np.concatenate(writes)
    order = np.argsort(gran, kind="stable")
    gran, prog, inst, written = gran[order], prog[order], inst[order], written[order]
    starts = np.flatnonzero(np.concatenate(([True], gran[1:] != gran[:-1])))
    pmin, pmax = np.minimum.reduceat(prog, starts), np.maximum.reduceat(prog, starts)
    kmin, kmax = np.minimum.reduceat(inst, starts), np.maximum.reduceat(inst, starts)
    wrote = np.maximum.reduceat(written.astype(np.int8), starts) > 0
    return bool((wrote & (pmin != pmax) & (kmin != kmax)).any())
