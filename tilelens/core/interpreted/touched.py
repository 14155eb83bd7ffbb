"""Snapshots proportional to what an interpreted launch touches.

Copying every tensor argument's whole span before and after a launch costs what the tensors weigh, not what the
launch does: 64 elements written into a 256 MiB KV cache cost two 256 MiB copies and 513 MB of blobs. Here a
large argument is *deferred*: nothing is copied before the launch; the write log
(:class:`tilelens.core.engine.writelog.WriteLog`) keeps the old bytes of every lane the launch writes, and after it:

* the touched elements come from the access trace: every active lane of every event, read or write, mapped by
  its address onto each deferred argument's span (so out-of-bounds lanes that land in another argument, and
  aliased views, count for the argument whose memory they touched);
* their after-values are gathered from memory, their before-values are the after-values with the write log's
  old bytes put back, newest write first (an element only read was never written: before = after).

Per argument the smaller wins: the touched elements' indices and values (``ArgumentRecord.touched``, stored as a
sparse snapshot, :mod:`tilelens.store.files.sparse`), or the whole span as today, rebuilt from memory and the write
log byte for byte as a copy taken before the launch would have been (same blob, so identical tensors across
launches stay stored once). Small spans (``WHOLE_BELOW``) are copied before the launch as always: cheaper than
any analysis.

Invariants: the touched set is a superset of the elements the launch read or wrote (it may hold a neighbour
more when an access is wider than, or misaligned with, the argument's elements); the write log noted every
write to argument memory (:mod:`tilelens.core.engine.memhooks`), so before-values are exact; the compiled backend
keeps whole-span snapshots (:mod:`tilelens.core.compiled.snapshots`), having no trace to know the touched elements by.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from tilelens.core.engine.writelog import WriteLog
from tilelens.core.kernel.arguments import extent, same_bytes, span_copy
from tilelens.core.kernel.spans import SpanTable
from tilelens.records import AccessSummary, ArgumentRecord
from tilelens.store.files.arrowbuild import column_numbers

#: Spans up to this many bytes are copied whole before the launch, as they always were.
WHOLE_BELOW = 1 << 20
INDEX_BYTES = 8  # one int64 position per stored element
#: Lanes decoded at most per launch to find the touched set, per byte of deferred spans (beyond: whole).
DECODE_FACTOR = 4


def sparse_cost(elements: int, itemsize: int) -> int:
    """Bytes a sparse snapshot of ``elements`` takes, before and after."""
    return elements * (INDEX_BYTES + 2 * itemsize)


def sparse_wins(elements: int, span: int, itemsize: int) -> bool:
    """Sparse when it takes at most half of a whole before-and-after pair (whole: dedup and simplicity)."""
    return 2 * sparse_cost(elements, itemsize) <= 2 * span * itemsize


@dataclass
class _Deferred:
    record: ArgumentRecord
    tensor: torch.Tensor
    span: int  # elements
    itemsize: int


class TouchedSnapshots:
    """One launch's deferred arguments; ``finish`` fills their snapshots once the launch has run."""

    def __init__(self, records: list[ArgumentRecord], tensors: dict[int, torch.Tensor]) -> None:
        self.deferred = [
            _Deferred(rec, t, extent(t), t.element_size())
            for rec in records
            if (t := tensors.get(rec.position)) is not None
        ]

    @property
    def needed(self) -> bool:
        return bool(self.deferred)

    def finish(
        self,
        trace: pa.Table | None,
        spans: SpanTable,
        writes: WriteLog,
        per_arg: dict[int, AccessSummary],
        summary: AccessSummary,
    ) -> None:
        host = _host_spans(spans)
        sparse: list[tuple[_Deferred, int, int]] = []
        for d in self.deferred:
            where = host.get(d.record.position)
            if (
                where is None
                or trace is None
                or not _worth_decoding(d, self.deferred, per_arg, summary, trace)
            ):
                self._whole(d, where, writes)
            else:
                sparse.append((d, *where))
        if not sparse:
            return
        touched = _touched(trace, spans, [(start, end, d.itemsize) for d, start, end in sparse])
        for (d, start, end), idx in zip(sparse, touched):
            if sparse_wins(idx.size, d.span, d.itemsize):
                self._sparse(d, idx, start, writes)
            else:
                self._whole(d, (start, end), writes)

    # -- building the two kinds of snapshot ----------------------------------------------------------------

    def _whole(self, d: _Deferred, where: tuple[int, int] | None, writes: WriteLog) -> None:
        """The whole span before (memory now, written bytes put back) and after, as a copy before would be."""
        rec = d.record
        after = span_copy(d.tensor)
        if not writes.complete:  # a write went unnoted: what it overwrote is unknown, so is the input
            rec.before = rec.after = None
            return
        before = after.clone()
        if where is not None and d.span:
            raw = before.view(torch.uint8).numpy()
            _put_back(writes, where[0], where[1], lambda b, old: raw.__setitem__(b, old))
        rec.before = before
        rec.after = None if same_bytes(after, before) else after

    def _sparse(self, d: _Deferred, idx: np.ndarray, start: int, writes: WriteLog) -> None:
        rec = d.record
        if not writes.complete:
            rec.before = rec.after = None
            return
        eb = d.itemsize
        after = _gather(d.tensor, d.span, idx)
        before = after.copy()
        if idx.size:

            def apply(b: np.ndarray, old: np.ndarray) -> None:
                elem, k = b // eb, b % eb
                pos = np.minimum(np.searchsorted(idx, elem), idx.size - 1)
                hit = idx[pos] == elem
                before[pos[hit], k[hit]] = old[hit]

            _put_back(writes, start, start + d.span * eb, apply)
        rec.touched = torch.from_numpy(idx)
        rec.before = _values(before, rec, d)
        rec.after = None if np.array_equal(after, before) else _values(after, rec, d)


def forget_untouched(
    records: list[ArgumentRecord],
    per_arg: dict[int, AccessSummary],
    aliased: list[tuple[int, int]],
    cross: dict[tuple[int, int], int],
) -> None:
    """Tensor arguments the launch never accessed keep no values: an empty sparse snapshot.

    Kernels take placeholders they never read (Liger passes a fresh ``torch.empty(1)`` label when there is none):
    a whole copy of one holds whatever the allocator left there, a new blob and fsync every launch, and nothing a
    replay of the same kernel needs. The empty snapshot is the same bytes every launch (stored once); a replay
    that does read the argument (an edited kernel) reads unknown elements and says so.

    Only plain cases: no trace event names the argument, it shares no storage or view with another argument, and
    no other argument's out-of-bounds lanes landed in it. Call with the trace of a launch that finished.
    """
    involved = {p for pair in aliased for p in pair} | {p for pair in cross for p in pair}
    groups = Counter(rec.storage_group for rec in records if rec.kind == "tensor")
    for rec in records:
        if (
            rec.kind == "tensor"
            and rec.before is not None
            and rec.touched is None
            and groups[rec.storage_group] == 1
            and rec.position not in per_arg
            and rec.position not in involved
        ):
            rec.touched = torch.empty(0, dtype=torch.int64)
            rec.before = torch.empty(0, dtype=rec.before.dtype)
            rec.after = None


def defer(t: torch.Tensor) -> bool:
    """Whether a tensor argument's snapshot waits for the trace: only spans worth more than the analysis."""
    return extent(t) * t.element_size() > WHOLE_BELOW


def _host_spans(spans: SpanTable) -> dict[int, tuple[int, int]]:
    """Host byte span per argument position (positions with one tensor only)."""
    out: dict[int, tuple[int, int]] = {}
    seen: set[int] = set()
    for s in spans.spans:
        if s.position in seen:
            out.pop(s.position, None)
            continue
        seen.add(s.position)
        out[s.position] = (s.start, s.end)
    return out


def _worth_decoding(
    d: _Deferred,
    deferred: list[_Deferred],
    per_arg: dict[int, AccessSummary],
    summary: AccessSummary,
    trace: pa.Table,
) -> bool:
    """Whether the lanes that could touch ``d`` are few enough for a sparse snapshot to be likely.

    A kernel that streams a whole tensor decides for the whole snapshot without decoding millions of lanes.
    The lanes that can touch an argument: those of events attributed to it or to an argument sharing its
    storage (aliased views), and every out-of-bounds lane of the launch.
    """
    group = d.record.storage_group
    positions = {d.record.position} | {
        x.record.position for x in deferred if group is not None and x.record.storage_group == group
    }
    lanes = summary.oob_lanes
    for pos in positions:
        s = per_arg.get(pos)
        if s is not None:
            lanes += s.load_lanes + s.store_lanes + s.atomic_lanes
    if trace.num_rows and "elem_bytes" in trace.column_names:
        widest = int(np.max(column_numbers(trace, "elem_bytes")))
        lanes *= max(1, -(-widest // d.itemsize))
    return sparse_cost(lanes, d.itemsize) <= DECODE_FACTOR * d.span * d.itemsize


def _touched(trace: pa.Table, spans: SpanTable, targets: list[tuple[int, int, int]]) -> list[np.ndarray]:
    """Per target (host start, end, itemsize): sorted unique element positions its active lanes touched."""
    from tilelens.store.files.lanes import LaneDecoder

    found: list[list[np.ndarray]] = [[] for _ in targets]
    if trace.num_rows == 0:
        return [np.zeros(0, dtype=np.int64) for _ in targets]
    arg = column_numbers(trace, "arg")
    elem_bytes = column_numbers(trace, "elem_bytes").astype(np.int64)
    # Where each row's offsets count from: its argument's host start, in its argument's element size.
    starts = {s.position: (s.start, s.elem_bytes) for s in spans.spans}
    row_start = np.array([starts.get(int(a), (0, 0))[0] for a in arg], dtype=np.int64)
    row_unit = np.array([starts.get(int(a), (0, 0))[1] or int(e) for a, e in zip(arg, elem_bytes)], np.int64)
    shared = arg == -2  # Gluon shared memory: not global bytes
    # Offsets are floored to the row's unit: an access of another width (or unattributed) may reach one more.
    slack = np.where((elem_bytes != row_unit) | (arg < 0), row_unit - 1, 0)
    decoder = LaneDecoder(trace)
    for chunk in decoder.chunks():
        keep = chunk.active & ~shared[chunk.row]
        if not keep.any():
            continue
        row = chunk.row[keep]
        lo = row_start[row] + chunk.offset[keep] * row_unit[row]
        hi = lo + elem_bytes[row] - 1 + slack[row]
        for i, (start, end, eb) in enumerate(targets):
            sel = (hi >= start) & (lo < end)
            if not sel.any():
                continue
            first = (np.maximum(lo[sel], start) - start) // eb
            last = (np.minimum(hi[sel], end - 1) - start) // eb
            wide = last > first
            parts = [first]
            if wide.any():
                f, n = first[wide], (last - first)[wide]
                for k in range(1, int(n.max()) + 1):
                    parts.append(f[n >= k] + k)
            found[i].append(np.unique(np.concatenate(parts)))
    return [np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64) for parts in found]


def _put_back(writes: WriteLog, start: int, end: int, apply: Any) -> None:
    """Call ``apply(byte positions in [start, end), their old bytes)`` for each write, newest first.

    Applying newest first leaves every byte with what it held before the launch's first write to it.
    """
    for entry in reversed(list(writes.entries())):
        width = entry.old.shape[1]
        addrs = entry.addrs
        inside = (addrs + np.uint64(width) > np.uint64(start)) & (addrs < np.uint64(end))
        if not inside.any():
            continue
        b = (addrs[inside].astype(np.int64) - start)[:, None] + np.arange(width, dtype=np.int64)
        old = entry.old[inside]
        ok = (b >= 0) & (b < end - start)
        apply(b[ok], old[ok])


def _gather(t: torch.Tensor, span: int, idx: np.ndarray) -> np.ndarray:
    """The bytes of span elements ``idx`` of ``t``, shape (len(idx), itemsize), on the host."""
    eb = t.element_size()
    flat = t.detach().as_strided((span,), (1,))
    out: np.ndarray
    if flat.device.type == "cpu":
        out = flat.view(torch.uint8).numpy().reshape(span, eb)[idx]
    else:
        picked = flat[torch.from_numpy(idx).to(flat.device)].cpu()
        out = picked.contiguous().view(torch.uint8).numpy().reshape(-1, eb).copy()
    return out


def _values(raw: np.ndarray, rec: ArgumentRecord, d: _Deferred) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(raw).reshape(-1)).view(d.tensor.dtype)
