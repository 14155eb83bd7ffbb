"""Whether any program of a batched run could have seen what another program of the launch wrote.

The stock interpreter runs program 0 to its end, then program 1, ...; the batched engine runs statement by
statement for all programs at once. The two agree on every value exactly when no memory location is touched
by two different programs with at least one of the touches a write (store or atomic), except where all the
touches of that location happen in one batched statement instance: there the C++ memory functions go through
the lanes in flattened order, which is program-major, the stock order (verified for atomics: lanes hitting one
address are applied one after another, each seeing the previous one's result).

Only lanes that reach memory count: active ones, not stray (never dereferenced, see ``tilelens.core.bounds``).
Locations are compared at the granularity of the greatest common divisor of the element sizes, so a 4-byte
store and a 1-byte load of one of its bytes still meet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tilelens.core.access import LOAD


def _touched(entry: Any) -> tuple[np.ndarray, np.ndarray]:
    """(byte addresses, program of each) of the lanes of one batched entry that reach memory."""
    op, addrs, mask, eb, _line, _values, stray = entry[:7]
    act = np.ones(addrs.shape, dtype=bool) if mask is None else np.broadcast_to(mask, addrs.shape)
    if stray is not None:
        act = act & ~stray
    flat = act.reshape(addrs.shape[0], -1)
    progs, lanes = np.nonzero(flat)
    return addrs.reshape(addrs.shape[0], -1)[progs, lanes], progs


def conflict(entries: Sequence[Any]) -> bool:
    """True when the batched run's order could differ from the per-program run's (see the module docstring)."""
    touched: list[tuple[int, np.ndarray, np.ndarray, int, bool]] = []
    hulls_w: list[tuple[int, int]] = []
    for k, entry in enumerate(entries):
        addrs, progs = _touched(entry)
        if addrs.size == 0:
            continue
        write = entry[0] != LOAD
        eb = int(entry[3])
        touched.append((k, addrs, progs, eb, write))
        if write:
            hulls_w.append((int(addrs.min()), int(addrs.max()) + eb))
    if not hulls_w:
        return False
    # Only entries whose address range meets some write's can conflict.
    lo_w = np.array([h[0] for h in hulls_w], dtype=np.uint64)
    hi_w = np.array([h[1] for h in hulls_w], dtype=np.uint64)
    relevant = []
    for k, addrs, progs, eb, write in touched:
        lo, hi = int(addrs.min()), int(addrs.max()) + eb
        if write or bool(((lo_w < np.uint64(hi)) & (hi_w > np.uint64(lo))).any()):
            relevant.append((k, addrs, progs, eb, write))
    # A quick exit: every relevant lane of one program only.
    if all(int(p.min()) == int(p.max()) == int(relevant[0][2][0]) for _, _, p, _, _ in relevant):
        return False
    g = 0
    for _, _, _, eb, _ in relevant:
        g = math.gcd(g, eb)
    if any(bool((a % np.uint64(g)).any()) for _, a, _, _, _ in relevant):
        g = 1
    grans, progs_all, insts, writes = [], [], [], []
    for k, addrs, progs, eb, write in relevant:
        gran = addrs // np.uint64(g)
        n = eb // g
        if n > 1:
            gran = (gran[:, None] + np.arange(n, dtype=np.uint64)).ravel()
            progs = np.repeat(progs, n)
        grans.append(gran)
        progs_all.append(progs.astype(np.int64))
        insts.append(np.full(gran.size, k, dtype=np.int64))
        writes.append(np.full(gran.size, write))
    gran = np.concatenate(grans)
    prog = np.concatenate(progs_all)
    inst = np.concatenate(insts)
    written = np.unique(gran[np.concatenate(writes)])
    keep = np.isin(gran, written, assume_unique=False)
    gran, prog, inst = gran[keep], prog[keep], inst[keep]
    order = np.argsort(gran, kind="stable")
    gran, prog, inst = gran[order], prog[order], inst[order]
    starts = np.flatnonzero(np.concatenate(([True], gran[1:] != gran[:-1])))
    pmin, pmax = np.minimum.reduceat(prog, starts), np.maximum.reduceat(prog, starts)
    kmin, kmax = np.minimum.reduceat(inst, starts), np.maximum.reduceat(inst, starts)
    return bool(((pmin != pmax) & (kmin != kmax)).any())
