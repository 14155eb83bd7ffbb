"""A grid-batched launch's access entries as trace rows, column by column (``AccessCollector._expand_batched``).

A batched entry holds one memory event of every program at once, ``(B, *shape)``. The common case, an affine
block wholly inside one argument's view, is worked out here for all programs together, as columns of ``B``
values each: what :meth:`AccessCollector._analyse` records for such a block (its fast path), value for value
(Python ints, the same bytes for masks). When every program of every entry is that case, the collector
interleaves the columns into its own, program-major; other programs go through ``_analyse`` one by one.
The cost is a few whole-batch numpy operations and a list per column, not a dict per program and event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tilelens.store.files.traces import TRACE_SCHEMA

if TYPE_CHECKING:
    from tilelens.core.kernel.spans import ArgSpan, SpanTable

# The columns an entry determines (the program ids and the event number come from the entry's place).
ROW_COLUMNS = tuple(n for n in TRACE_SCHEMA.names if n not in ("pid_x", "pid_y", "pid_z", "event"))

Columns = dict[str, list[Any]]


def fast_columns(
    spans: SpanTable, programs: int, entry: tuple[Any, ...]
) -> tuple[Columns, list[bool]] | None:
    """Per program, the row of an affine block wholly inside one argument's view, as columns of ``programs``
    values, and which programs are that case (the others' values are placeholders). None: no program is."""
    op, addrs, mask, eb, line, _values, _stray = entry
    if not spans.spans or addrs.ndim < 2 or addrs.shape[0] != programs:
        return None
    if addrs.dtype != np.uint64:
        return None
    b = addrs.shape[0]
    per = addrs.shape[1:]
    if addrs[0].size == 0:
        return None
    first = addrs.reshape(b, -1)[:, 0]
    strides = []
    for axis, n in enumerate(per):
        if n <= 1:
            strides.append(0)
            continue
        d = np.diff(addrs, axis=axis + 1)
        st = d.flat[0]
        if not (d == st).all():
            return None
        strides.append(int(np.int64(st.view(np.int64))))
    reach_lo = sum((n - 1) * st for n, st in zip(per, strides) if st < 0)
    reach_hi = sum((n - 1) * st for n, st in zip(per, strides) if st > 0)
    lo = first.astype(np.int64) + reach_lo
    hi = first.astype(np.int64) + reach_hi
    idx = np.searchsorted(spans.np_starts, first, side="right").astype(np.int64) - 1
    starts = np.array([s.start for s in spans.spans], dtype=np.int64)
    ends = np.array([s.end for s in spans.spans], dtype=np.int64)
    safe = np.maximum(idx, 0)
    if mask is None:
        active = np.full(b, addrs[0].size, dtype=np.int64)
    else:
        m = np.broadcast_to(mask, addrs.shape).reshape(b, -1)
        active = np.count_nonzero(m, axis=1)
    lanes = int(addrs[0].size)
    chosen: list[ArgSpan | None]
    if spans.aliased:
        chosen = _aliased_spans(spans, addrs, mask, eb, first, lo, hi, active, lanes)
    else:
        inside = (idx >= 0) & ((active == 0) | ((lo >= starts[safe]) & (hi + eb <= ends[safe])))
        chosen = [spans.spans[int(i)] if ok else None for i, ok in zip(idx.tolist(), inside.tolist())]
    if not any(span is not None for span in chosen):
        return None
    # Per program: its span's start, element size and position (placeholders where no span was chosen).
    start = np.array([s.start if s is not None else 0 for s in chosen], dtype=np.int64)
    ebytes = np.array([s.elem_bytes if s is not None else 1 for s in chosen], dtype=np.int64)
    rel0 = first.astype(np.int64) - start
    ok = np.array([s is not None for s in chosen]) & (rel0 % ebytes == 0)
    for st in strides:
        ok &= st % ebytes == 0
    if not ok.any():
        return None
    sizes = set(ebytes[ok].tolist())
    if len(sizes) == 1:  # one element size (nearly always): the strides are the same for every program
        size = sizes.pop()
        shared = [st // size for st in strides]
        stride_rows: list[Any] = [shared] * b
    else:
        stride_rows = [[st // int(e) for st in strides] for e in ebytes.tolist()]
    active_list = active.tolist()
    masks: list[bytes | None] = [None] * b
    partial = np.flatnonzero(ok & (active != lanes))
    if partial.size:
        bits = np.packbits(np.broadcast_to(mask, addrs.shape).reshape(b, -1)[partial], axis=1)
        for p, row in zip(partial.tolist(), bits):
            masks[p] = row.tobytes()
    shape = tuple(per)
    cols: Columns = {
        "strides": stride_rows,
        "offsets": [None] * b,
        "op": [op] * b,
        "arg": [s.position if s is not None else -1 for s in chosen],
        "line": [line] * b,
        "elem_bytes": [eb] * b,
        "shape": [shape] * b,
        "base": (rel0 // ebytes).tolist(),
        "mask": masks,
        "oob_mask": [None] * b,
        "lanes": [lanes] * b,
        "active": active_list,
        "oob": [0] * b,
        "stray_mask": [None] * b,
        "stray": [0] * b,
        "oob_values": [None] * b,
    }
    return cols, ok.tolist()


def _aliased_spans(
    spans: SpanTable,
    addrs: np.ndarray,
    mask: np.ndarray | None,
    eb: int,
    first: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    active: np.ndarray,
    lanes: int,
) -> list[ArgSpan | None]:
    """Per program of an affine batched entry over aliased views: the argument ``_analyse`` gives the block
    when it takes its fast path (None where it would not: that program is analysed on its own).

    As there: the most specific view holding every active lane (bounds of the active lanes only when some are
    masked), else the argument found at the first lane; the block is fast when all of its lanes checked lie in
    that view."""
    b = addrs.shape[0]
    live_lo, live_hi = lo, hi
    if mask is not None and bool((active != lanes).any()):
        flat = addrs.reshape(b, -1)
        m = np.broadcast_to(mask, addrs.shape).reshape(b, -1)
        live_lo = np.where(m, flat, np.uint64(np.iinfo(np.uint64).max)).min(axis=1).astype(np.int64)
        live_hi = np.where(m, flat, np.uint64(0)).max(axis=1).astype(np.int64)
    out: list[ArgSpan | None] = []
    for p in range(b):
        span = spans.find(int(first[p]))
        n_active = int(active[p])
        if n_active:
            if n_active == lanes:
                lo_p, hi_p = int(lo[p]), int(hi[p])
            else:
                lo_p, hi_p = int(live_lo[p]), int(live_hi[p])
            span = spans.containing(lo_p, hi_p + eb) or span
            if span is None or lo_p < span.start or hi_p + eb > span.end:
                span = None
        out.append(span)
    return out


def interleave(columns: Columns, fast: list[Columns], programs: list[tuple[int, int, int]]) -> None:
    """Append every program's rows of every entry to ``columns``, program-major, events numbered per program
    (the order the per-program run records them in): ``fast`` holds each entry's columns, every program fast."""
    events = len(fast)
    if not events:
        return
    for axis, name in enumerate(("pid_x", "pid_y", "pid_z")):
        columns[name].extend([p[axis] for p in programs for _ in range(events)])
    columns["event"].extend(list(range(events)) * len(programs))
    for name in ROW_COLUMNS:
        per_entry = [cols[name] for cols in fast]
        columns[name].extend([v for group in zip(*per_entry) for v in group])
