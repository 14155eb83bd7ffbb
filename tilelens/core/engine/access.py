"""Memory-access capture: turn interpreter pointer arrays into compact per-event rows.

Every interpreted ``tl.load``/``tl.store``/atomic hands us a block of byte addresses and a mask. We map the
block to the kernel argument whose view holds most of its active lanes (:meth:`SpanTable.attribute`), count
active lanes outside that argument's view (lanes in another argument's view are cross-tensor accesses,
counted per pair in ``AccessCollector.cross``), and encode offsets compactly: a block whose offsets are affine in its indices (the
common case: ``base + i * s0 + j * s1``) is stored as base and strides, only irregular blocks (gathers) keep
every lane. That is what keeps traces well under a byte per lane on disk. The trace format itself (schema,
encoding, row decoders) belongs to the store: :mod:`tilelens.store.files.traces`.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any, cast

import numpy as np
import pyarrow as pa

from tilelens.core.engine import batchrows
from tilelens.core.kernel.spans import SpanTable
from tilelens.records import AccessSummary
from tilelens.store.files.traces import TRACE_SCHEMA, encode_trace_reusing

LOAD, STORE, ATOMIC_CAS = "load", "store", "atomic_cas"
# Gluon shared-memory traffic (tilelens.core.engine.gluon): its own event kinds, in the shared address space of the
# program, under this ``arg``; never global bytes, never out of bounds of an argument.
SHARED_LOAD, SHARED_STORE = "shared_load", "shared_store"
SHARED_ARG = -2

# Accesses kept for batched analysis before a batch runs (about 8 bytes of addresses per lane held).
PENDING_LANES = 1 << 21


class _BatchProgram:
    """The program of an access made by all the programs of a grid-batched run at once."""

    def __repr__(self) -> str:
        return "BATCH_PROGRAM"


# What the builder's ``grid_idx`` holds during a grid-batched run (:mod:`tilelens.core.engine.batched`): the access
# hooks pass it on, and ``AccessCollector.record`` keeps the whole ``(B, *shape)`` block as one entry.
BATCH_PROGRAM: tuple[int, int, int] = _BatchProgram()  # type: ignore[assignment]


def _affine_strides(a: np.ndarray) -> list[int] | None:
    """Per-axis strides if ``a[i, j, ...] == a[0, ...] + i*s0 + j*s1 + ...`` holds exactly, else None.

    Works on raw uint64 addresses: differences wrap modulo 2**64 consistently, so equal wrapped differences
    mean an exact affine block, and a negative stride comes back as its two's complement.
    """
    if a.ndim == 1:
        if a.size <= 1:
            return [0]
        d = a[1:] - a[:-1]
        first = d[0]
        return [int(first.view(np.int64))] if (d == first).all() else None
    if a.ndim == 2:
        # Affine rows and columns on the edges, then one broadcast comparison for the interior.
        row = _affine_strides(a[0])
        col = _affine_strides(a[:, 0])
        if row is None or col is None:
            return None
        if a.shape[0] > 1 and a.shape[1] > 1 and not np.array_equal(a, a[:, :1] + (a[0] - a[0, 0])):
            return None
        return [col[0], row[0]]
    strides = []
    for axis, n in enumerate(a.shape):
        if n <= 1:
            strides.append(0)
            continue
        d = np.diff(a, axis=axis)
        first = d.flat[0]
        if not (d == first).all():
            return None
        strides.append(int(np.int64(first.view(np.int64))))
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
        f: FrameType | None = sys._getframe(3)
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
    """Accumulates the access events of one launch; ``finish`` turns them into a trace table and counts.

    ``record`` runs once per interpreted memory operation, so it does the least it can: a handful of numpy
    reductions on the block and list appends. Counting per argument waits for ``finish``, vectorised.
    """

    def __init__(self, spans: SpanTable | None = None) -> None:
        self.spans = spans or SpanTable([])
        self._frames = _FrameFilter()
        self._program: tuple[int, int, int] | None = None
        self._event = 0
        self._cols: dict[str, list[Any]] = {name: [] for name in TRACE_SCHEMA.names}
        self._pending: list[tuple[Any, ...]] = []
        self._pending_lanes = 0
        self.summary = AccessSummary()
        self.per_arg: dict[int, AccessSummary] = {}
        self.shared: dict[str, int] = {}  # Gluon shared-memory events and lanes, when there were any
        # (argument an event was attributed to, other argument whose view its out-of-bounds lanes hit): lanes
        self.cross: dict[tuple[int, int], int] = {}
        # A grid-batched run: its programs (stock loop order) and one entry per batched access, in statement
        # order (op, addrs, mask, elem_bytes, line, values, stray), each array with the program axis first.
        self.programs: list[tuple[int, int, int]] = []
        self.batched: list[tuple[Any, ...]] = []

    def reset(self) -> None:
        """Forget every access (a batched run that gave up); the spans stay."""
        spans = self.spans
        self.__init__(spans)  # type: ignore[misc]

    def begin_batch(self, programs: list[tuple[int, int, int]]) -> None:
        self.programs = programs

    def set_spans(self, spans: SpanTable) -> None:
        self.spans = spans

    def record(
        self,
        op: str,
        addrs: np.ndarray,
        mask: np.ndarray | None,
        elem_bytes: int,
        program: tuple[int, int, int],
        values: np.ndarray | None = None,
        stray: np.ndarray | None = None,
    ) -> None:
        """Note one access; the analysis runs later, in batches.

        Analysing each access where it happens, between thousands of interpreter operations, runs our code
        cold: about three times slower than the same work done in one tight loop. The interpreter never
        modifies an operand array after creating it, so keeping references is safe; batches bound the memory.
        ``values`` is what a load or atomic returned (kept for its out-of-bounds lanes), ``stray`` the lanes
        the bounds guard kept the interpreter from dereferencing.
        """
        if program is BATCH_PROGRAM:
            self.batched.append((op, addrs, mask, elem_bytes, self._frames.line(), values, stray))
            return
        if program != self._program:
            self._program = program
            self._event = 0
        self._pending.append(
            (op, addrs, mask, elem_bytes, program, self._event, self._frames.line(), values, stray)
        )
        self._event += 1
        self._pending_lanes += addrs.size
        if self._pending_lanes >= PENDING_LANES:
            self._drain()

    def next_event(self, program: tuple[int, int, int]) -> int:
        """The event index the next access of ``program`` will get (what a replay's recorded reads are keyed by)."""
        return self._event if program == self._program else 0

    def record_shared(
        self, op: str, addrs: np.ndarray, elem_bytes: int, program: tuple[int, int, int]
    ) -> None:
        """Note one Gluon shared-memory access (``addrs``: byte addresses in the program's shared memory)."""
        if program != self._program:
            self._program = program
            self._event = 0
        self._pending.append(
            (op, addrs, None, elem_bytes, program, self._event, self._frames.line(), None, None, True)
        )
        self._event += 1
        self._pending_lanes += addrs.size
        if self._pending_lanes >= PENDING_LANES:
            self._drain()

    def _drain(self) -> None:
        pending, self._pending, self._pending_lanes = self._pending, [], 0
        for event in pending:
            self._analyse(*event)

    def _analyse(
        self,
        op: str,
        addrs: np.ndarray,
        mask: np.ndarray | None,
        elem_bytes: int,
        program: tuple[int, int, int],
        event: int,
        line: int,
        values: np.ndarray | None = None,
        stray: np.ndarray | None = None,
        shared: bool = False,
    ) -> None:
        if type(addrs) is not np.ndarray or addrs.dtype != np.uint64:
            addrs = np.asarray(addrs).astype(np.uint64, copy=False)
        lanes = addrs.size
        if mask is None:
            active = lanes
        else:
            if type(mask) is not np.ndarray or mask.dtype != np.bool_:
                mask = np.asarray(mask, dtype=bool)
            if mask.shape != addrs.shape:
                mask = np.broadcast_to(mask, addrs.shape)
            active = int(np.count_nonzero(mask))
        all_active = active == lanes
        first = int(addrs.flat[0]) if lanes else 0
        strides = _affine_strides(addrs) if lanes else []
        # Bounds of every lane (masked ones too): free for an affine block, two reductions otherwise.
        if strides is not None:
            lo = hi = first
            for n, st in zip(addrs.shape, strides):
                reach = (n - 1) * st
                if reach < 0:
                    lo += reach
                else:
                    hi += reach
        elif lanes:
            lo, hi = int(addrs.min()), int(addrs.max())
        spans = self.spans if not shared else SpanTable([])
        span = spans.find(first) if lanes else None
        oob = 0
        oob_bits = oob_values = stray_bits = None
        n_stray = 0
        if active and not shared:
            if spans.aliased:
                if not all_active:
                    live = addrs[mask]
                    lo, hi = int(live.min()), int(live.max())
                span = spans.containing(lo, hi + elem_bytes) or span
            # Fast path: every lane, masked or not, inside the first lane's argument (aliasing or not).
            if span is None or lo < span.start or hi + elem_bytes > span.end:
                span, outside, hits = spans.attribute(addrs, None if all_active else mask)
                for hit, n in hits.items():
                    key = (span.position if span is not None else -1, hit)
                    self.cross[key] = self.cross.get(key, 0) + n
                oob = int(np.count_nonzero(outside))
                if oob:
                    oob_bits = np.packbits(outside.ravel()).tobytes()
                    if values is not None and values.shape == outside.shape:
                        oob_values = np.ascontiguousarray(values[outside]).tobytes()
                if stray is not None:
                    n_stray = int(np.count_nonzero(stray))
                    stray_bits = np.packbits(stray.ravel()).tobytes() if n_stray else None
        if span is not None:
            pos, start, ebytes = span.position, span.start, span.elem_bytes
        else:
            pos, start, ebytes = (SHARED_ARG if shared else -1), 0, elem_bytes
        rel0 = first - start
        c = self._cols
        if strides is not None and rel0 % ebytes == 0 and all(st % ebytes == 0 for st in strides):
            c["strides"].append([st // ebytes for st in strides])
            c["offsets"].append(None)
        else:
            c["strides"].append(None)
            c["offsets"].append((addrs.view(np.int64).ravel() - start) // ebytes)
        c["pid_x"].append(program[0])
        c["pid_y"].append(program[1])
        c["pid_z"].append(program[2])
        c["event"].append(event)
        c["op"].append(op)
        c["arg"].append(pos)
        c["line"].append(line)
        c["elem_bytes"].append(elem_bytes)
        c["shape"].append(addrs.shape)
        c["base"].append(rel0 // ebytes)
        c["mask"].append(None if all_active else np.packbits(cast("np.ndarray", mask).ravel()).tobytes())
        c["oob_mask"].append(oob_bits)
        c["lanes"].append(lanes)
        c["active"].append(active)
        c["oob"].append(oob)
        c["stray_mask"].append(stray_bits)
        c["stray"].append(n_stray)
        c["oob_values"].append(oob_values)

    def _tally(self) -> None:
        c = self._cols
        if not c["event"]:
            return
        ops = np.array(c["op"], dtype=object)
        args = np.array(c["arg"], dtype=np.int64)
        active = np.array(c["active"], dtype=np.int64)
        nbytes = active * np.array(c["elem_bytes"], dtype=np.int64)
        oob = np.array(c["oob"], dtype=np.int64)
        lanes = np.array(c["lanes"], dtype=np.int64)
        stray = np.array(c["stray"], dtype=np.int64)
        is_load = ops == LOAD
        is_store = ops == STORE
        is_shared = (ops == SHARED_LOAD) | (ops == SHARED_STORE)
        is_atomic = ~(is_load | is_store | is_shared)

        def fill(s: AccessSummary, sel: np.ndarray) -> None:
            s.events = int(sel.sum())
            s.lanes = int(lanes[sel].sum())
            s.oob_lanes = int(oob[sel].sum())
            s.oob_load_lanes = int(oob[sel & is_load].sum())
            s.oob_store_lanes = int(oob[sel & ~is_load].sum())
            s.dropped_lanes = int(stray[sel & ~is_load].sum())
            s.loads = int((sel & is_load).sum())
            s.stores = int((sel & is_store).sum())
            s.atomics = int((sel & is_atomic).sum())
            s.load_lanes = int(active[sel & is_load].sum())
            s.store_lanes = int(active[sel & is_store].sum())
            s.atomic_lanes = int(active[sel & is_atomic].sum())
            s.bytes_loaded = int(nbytes[sel & (is_load | is_atomic)].sum())
            s.bytes_stored = int(nbytes[sel & (is_store | is_atomic)].sum())

        global_ = ~is_shared
        fill(self.summary, global_)
        self.per_arg = {}
        for pos in np.unique(args[global_]).tolist():
            fill(self.per_arg.setdefault(pos, AccessSummary()), global_ & (args == pos))
        self.shared = {
            "events": int(is_shared.sum()),
            "load_lanes": int(lanes[ops == SHARED_LOAD].sum()),
            "store_lanes": int(lanes[ops == SHARED_STORE].sum()),
        }

    def _expand_batched(self) -> None:
        """The batched entries as the per-program run records them: program-major, events numbered per program.

        Each entry's common case is worked out for all programs at once, as columns
        (:func:`tilelens.core.engine.batchrows.fast_columns`); when it covers every program of every entry the
        columns are interleaved into the trace's. Otherwise the programs it does not cover go through
        :meth:`_analyse` one by one, exactly as the per-program run does.
        """
        entries, self.batched = self.batched, []
        fast = [batchrows.fast_columns(self.spans, len(self.programs), entry) for entry in entries]
        c = self._cols
        if all(f is not None and all(f[1]) for f in fast):
            batchrows.interleave(c, [f[0] for f in fast if f is not None], self.programs)
            return
        names = batchrows.ROW_COLUMNS
        for p, program in enumerate(self.programs):
            for event, (op, addrs, mask, eb, line, values, stray) in enumerate(entries):
                found = fast[event]
                if found is None or not found[1][p]:
                    self._analyse(
                        op,
                        addrs[p],
                        None if mask is None else mask[p],
                        eb,
                        program,
                        event,
                        line,
                        None if values is None else values[p],
                        None if stray is None else stray[p],
                    )
                    continue
                c["pid_x"].append(program[0])
                c["pid_y"].append(program[1])
                c["pid_z"].append(program[2])
                c["event"].append(event)
                for name in names:
                    c[name].append(found[0][name][p])

    def finish(self) -> pa.Table:
        self._drain()
        if self.batched:
            self._expand_batched()
        self._tally()
        return encode_trace_reusing(self._cols)
