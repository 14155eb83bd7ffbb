"""Memory-access capture: turn interpreter pointer arrays into compact per-event rows.

Every interpreted ``tl.load``/``tl.store``/atomic hands us a block of byte addresses and a mask. We map the
block to the kernel argument it falls in (a sorted table of argument byte spans), count active lanes that fall
outside every argument, and encode offsets compactly: a block whose offsets are affine in its indices (the
common case: ``base + i * s0 + j * s1``) is stored as base and strides, only irregular blocks (gathers) keep
every lane. That is what keeps traces well under a byte per lane on disk.
"""

from __future__ import annotations

import bisect
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from tilelens.records import AccessSummary

TRACE_SCHEMA = pa.schema(
    [
        pa.field("pid_x", pa.int32()),
        pa.field("pid_y", pa.int32()),
        pa.field("pid_z", pa.int32()),
        pa.field("event", pa.int32()),  # index of the event within its program
        pa.field("op", pa.dictionary(pa.int8(), pa.string())),  # load, store, atomic_cas, atomic_<rmw op>
        pa.field("arg", pa.int16()),  # kernel parameter position, -1 when no argument is near
        pa.field("line", pa.int32()),  # kernel source line of the access
        pa.field("elem_bytes", pa.int8()),
        pa.field("shape", pa.list_(pa.int32())),  # block shape of the access
        pa.field("base", pa.int64()),  # element offset of lane 0, relative to the argument
        pa.field("strides", pa.list_(pa.int64())),  # element strides per block axis; null when not affine
        pa.field("offsets", pa.list_(pa.int64())),  # every lane's element offset; null when affine
        pa.field(
            "mask", pa.binary()
        ),  # packed bits (numpy.packbits order) of active lanes; null = all active
        pa.field("oob_mask", pa.binary()),  # packed bits of active lanes outside every argument; null = none
        pa.field("lanes", pa.int32()),
        pa.field("active", pa.int32()),
        pa.field("oob", pa.int32()),
    ]
)

LOAD, STORE, ATOMIC_CAS = "load", "store", "atomic_cas"


@dataclass(frozen=True)
class ArgSpan:
    """Byte span of one tensor argument as the interpreter sees it (host addresses)."""

    position: int
    start: int
    end: int
    elem_bytes: int


class SpanTable:
    """Sorted argument spans for address -> argument lookup.

    Overlapping spans (aliased views) are kept; a lane is attributed to the first span containing it in
    parameter order, and ``aliased`` lists the overlapping pairs so the launch can flag them.
    """

    def __init__(self, spans: list[ArgSpan]) -> None:
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


def _affine_strides(a: np.ndarray) -> list[int] | None:
    """Per-axis strides if ``a[i, j, ...] == a[0, ...] + i*s0 + j*s1 + ...`` holds exactly, else None."""
    strides = []
    for axis, n in enumerate(a.shape):
        if n <= 1:
            strides.append(0)
            continue
        d = np.diff(a, axis=axis)
        first = int(d.flat[0])
        if not (d == first).all():
            return None
        strides.append(first)
    return strides


class _FrameFilter:
    """Finds the kernel source line of an access by skipping Triton, numpy and TileLens frames."""

    def __init__(self) -> None:
        import triton

        self._skip_prefixes = tuple(
            p
            for p in {
                _package_dir(triton),
                _package_dir(np),
                _package_dir(sys.modules["tilelens"]),
            }
            if p
        )
        self._verdict: dict[str, bool] = {}

    def line(self) -> int:
        f = sys._getframe(3)
        verdict = self._verdict
        while f is not None:
            fname = f.f_code.co_filename
            skip = verdict.get(fname)
            if skip is None:
                skip = verdict[fname] = fname.startswith(self._skip_prefixes) or fname.startswith("<")
            if not skip:
                return f.f_lineno
            f = f.f_back
        return -1


def _package_dir(mod: Any) -> str:
    import os

    path = getattr(mod, "__file__", None)
    return os.path.dirname(path) if path else ""


class AccessCollector:
    """Accumulates the access events of one launch; ``finish`` turns them into a trace table."""

    def __init__(self, spans: SpanTable | None = None) -> None:
        self.spans = spans or SpanTable([])
        self._frames = _FrameFilter()
        self._program: tuple[int, int, int] | None = None
        self._event = 0
        cols: dict[str, list[Any]] = {name: [] for name in TRACE_SCHEMA.names}
        self._cols = cols
        self._offset_parts: list[np.ndarray] = []
        self.summary = AccessSummary()
        self.per_arg: dict[int, AccessSummary] = {}

    def set_spans(self, spans: SpanTable) -> None:
        self.spans = spans

    def record(
        self,
        op: str,
        addrs: np.ndarray,
        mask: np.ndarray | None,
        elem_bytes: int,
        program: tuple[int, int, int],
    ) -> None:
        if program != self._program:
            self._program = program
            self._event = 0
        addrs = np.asarray(addrs)
        if addrs.dtype != np.uint64:
            addrs = addrs.astype(np.uint64)
        lanes = addrs.size
        if mask is None:
            all_active = True
        else:
            mask = np.broadcast_to(np.asarray(mask, dtype=bool), addrs.shape)
            all_active = bool(mask.all())
        if all_active:
            active = lanes
            active_addrs = addrs
        else:
            active = int(np.count_nonzero(mask))
            active_addrs = addrs[mask]
        spans = self.spans
        # Attribute the event to the argument of its first active lane (lane 0 when none is active).
        probe = int(active_addrs.flat[0]) if active else int(addrs.flat[0]) if lanes else 0
        span = spans.find(probe)
        oob = 0
        oob_bits = None
        if active:
            lo = int(active_addrs.min())
            hi = int(active_addrs.max())
            if span is None or lo < span.start or hi + elem_bytes > span.end or spans.aliased:
                outside = spans.outside(addrs)
                if not all_active:
                    outside &= mask
                oob = int(np.count_nonzero(outside))
                if oob:
                    oob_bits = np.packbits(outside.ravel()).tobytes()
        if span is not None:
            pos, start, ebytes = span.position, span.start, span.elem_bytes
        else:
            pos, start, ebytes = -1, 0, elem_bytes
        rel = addrs.view(np.int64) - np.int64(start)
        strides = _affine_strides(rel)
        base = int(rel.flat[0]) // ebytes if lanes else 0
        if (
            strides is not None
            and all(s % ebytes == 0 for s in strides)
            and (lanes == 0 or int(rel.flat[0]) % ebytes == 0)
        ):
            strides = [s // ebytes for s in strides]
            offsets = None
        else:
            strides = None
            offsets = rel // ebytes
        c = self._cols
        c["pid_x"].append(program[0])
        c["pid_y"].append(program[1])
        c["pid_z"].append(program[2])
        c["event"].append(self._event)
        c["op"].append(op)
        c["arg"].append(pos)
        c["line"].append(self._frames.line())
        c["elem_bytes"].append(elem_bytes)
        c["shape"].append(list(addrs.shape))
        c["base"].append(base)
        c["strides"].append(strides)
        if offsets is None:
            c["offsets"].append(None)
        else:
            c["offsets"].append(len(self._offset_parts))
            self._offset_parts.append(offsets.ravel())
        c["mask"].append(None if all_active else np.packbits(mask.ravel()).tobytes())
        c["oob_mask"].append(oob_bits)
        c["lanes"].append(lanes)
        c["active"].append(active)
        c["oob"].append(oob)
        self._event += 1
        self._count(op, pos, active, active * elem_bytes, oob)

    def _count(self, op: str, pos: int, active: int, nbytes: int, oob: int) -> None:
        for s in (self.summary, self.per_arg.setdefault(pos, AccessSummary())):
            s.events += 1
            s.oob_lanes += oob
            if op == LOAD:
                s.loads += 1
                s.load_lanes += active
                s.bytes_loaded += nbytes
            elif op == STORE:
                s.stores += 1
                s.store_lanes += active
                s.bytes_stored += nbytes
            else:
                s.atomics += 1
                s.atomic_lanes += active
                s.bytes_loaded += nbytes
                s.bytes_stored += nbytes

    def finish(self) -> pa.Table:
        c = self._cols
        n = len(c["event"])
        self.summary.lanes = int(sum(c["lanes"]))
        # Irregular offsets become one list column built from a flat values buffer, without Python lists.
        parts = self._offset_parts
        validity = np.array([o is not None for o in c["offsets"]], dtype=bool)
        lengths = np.zeros(n, dtype=np.int32)
        for i, o in enumerate(c["offsets"]):
            if o is not None:
                lengths[i] = parts[o].size
        list_offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=list_offsets[1:])
        values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        offsets_arr = pa.ListArray.from_arrays(
            pa.array(list_offsets, type=pa.int32()),
            pa.array(values, type=pa.int64()),
            mask=pa.array(~validity) if n else None,
        )
        arrays = []
        for field in TRACE_SCHEMA:
            if field.name == "offsets":
                arrays.append(offsets_arr)
            elif field.name == "op":
                arrays.append(pa.array(c["op"], type=pa.string()).dictionary_encode().cast(field.type))
            else:
                arrays.append(pa.array(c[field.name], type=field.type))
        return pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA)


def lane_offsets(row: dict[str, Any]) -> np.ndarray:
    """Every lane's element offset of one trace row (a dict as from ``Table.to_pylist()``), in block shape."""
    shape = tuple(row["shape"])
    if row["offsets"] is not None:
        return np.asarray(row["offsets"], dtype=np.int64).reshape(shape)
    out = np.full(shape, row["base"], dtype=np.int64)
    for axis, stride in enumerate(row["strides"]):
        index_shape = [1] * len(shape)
        index_shape[axis] = shape[axis]
        out = out + np.arange(shape[axis], dtype=np.int64).reshape(index_shape) * stride
    return out


def _unpack(bits: bytes | None, shape: tuple[int, ...]) -> np.ndarray | None:
    if bits is None:
        return None
    n = int(np.prod(shape)) if shape else 1
    return np.unpackbits(np.frombuffer(bits, dtype=np.uint8), count=n).astype(bool).reshape(shape)


def lane_mask(row: dict[str, Any]) -> np.ndarray:
    """Which lanes of one trace row were active."""
    shape = tuple(row["shape"])
    mask = _unpack(row["mask"], shape)
    return np.ones(shape, dtype=bool) if mask is None else mask


def lane_oob(row: dict[str, Any]) -> np.ndarray:
    """Which active lanes of one trace row fell outside every argument."""
    shape = tuple(row["shape"])
    oob = _unpack(row["oob_mask"], shape)
    return np.zeros(shape, dtype=bool) if oob is None else oob
