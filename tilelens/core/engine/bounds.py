"""Keeping an interpreted kernel's memory accesses inside its arguments' memory.

Triton's interpreter dereferences every active lane it is given: a store past a tensor's end writes into the
host heap (``free(): invalid pointer``, SIGABRT), a load far outside reads unmapped memory (SIGSEGV). The
access hooks ask :class:`StorageTable` about every block before the interpreter touches it. An active lane is

* **in bounds** when it lies in the view (the span the view reaches) of the argument its event is attributed
  to: the one whose view holds most of the event's active lanes (``SpanTable.attribute`` in
  :mod:`tilelens.core.engine.access`), whatever else lies around it in memory;
* **out of bounds** (counted in ``oob``) when it lies outside that view; a lane inside another argument's view
  is a cross-tensor access, out of bounds too (``cross_args`` in the launch's config). If it lies inside some
  argument's *storage* (the whole allocation behind a view: a neighbour's memory, valid to touch), it is
  read and written exactly as compiled code would;
* **stray** (counted in ``stray``, a subset of out of bounds) when some of its bytes lie outside every
  argument's storage. The interpreter never dereferences a stray lane:

  - store and atomic lanes are masked off, never written ("dropped"); an atomic returns 0 for them;
  - load lanes read through :func:`read_stray`, a fault-safe path (``/proc/self/mem`` on Linux): a lane
    within ``STRAY_READ_BYTES`` of an argument's storage gets the bytes that are there (what the stock
    interpreter would read), or 0 where nothing is mapped; a lane further away, or on a system without that
    path, reads 0 without touching memory.

What every out-of-bounds load and atomic lane read is kept in the trace (``oob_values``), so a replay can
feed the same values back (:class:`RecordedReads`) whatever memory surrounds the rebuilt tensors.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tilelens.core.kernel.spans import StorageTable
from tilelens.errors import OutOfBoundsError as OutOfBoundsError  # what on_oob="raise" raises
from tilelens.errors import UsageError

if TYPE_CHECKING:
    import pyarrow as pa

    from tilelens.records import LaunchRecord

# Stray load lanes further than this from every argument's storage are not read at all (value 0): what the
# history keeps of memory no argument owns stays near the arguments, and a CUDA replay can only place bytes
# this close to its rebuilt tensors (see tilelens.replay.rebuild).
STRAY_READ_BYTES = 64 * 1024

OobPolicy = Literal["record", "raise"]
OOB_POLICIES: tuple[str, ...] = ("record", "raise")
# The default of ``tilelens.record(on_oob=...)`` and ``tilelens record --on-oob``, resolved by
# :func:`resolve_policy`, the one place that decides (a future settings file would feed it too).
DEFAULT_ON_OOB: OobPolicy = "record"


def resolve_policy(on_oob: str | None) -> OobPolicy:
    """The out-of-bounds policy in force: the explicit choice, else the default; refuses unknown names."""
    policy = DEFAULT_ON_OOB if on_oob is None else on_oob
    if policy not in OOB_POLICIES:
        raise UsageError(f"on_oob must be one of {', '.join(OOB_POLICIES)}, not {on_oob!r}")
    return policy  # type: ignore[return-value]


class _ProcessMemory:
    """Fault-safe reads of this process's memory: ``pread`` on ``/proc/self/mem`` fails, not crashes."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._tried = False

    def fd(self) -> int | None:
        if not self._tried:
            self._tried = True
            try:
                self._fd = os.open("/proc/self/mem", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                self._fd = None
        return self._fd

    def read(self, addr: int, n: int) -> bytes | None:
        fd = self.fd()
        if fd is None:
            return None
        try:
            data = os.pread(fd, n, addr)
        except (OSError, OverflowError, ValueError):
            return None
        return data if len(data) == n else None


_memory = _ProcessMemory()


def read_stray(
    data: np.ndarray, addrs: np.ndarray, stray: np.ndarray, elem_bytes: int, storage: StorageTable
) -> np.ndarray:
    """``data`` with its stray lanes set to what memory held there (see the module docstring), as a copy."""
    out = np.array(data, copy=True)
    if out.shape != stray.shape:
        return out
    flat_out = out.reshape(-1)
    lanes = np.flatnonzero(stray.reshape(-1))
    flat_out[lanes] = 0
    if out.dtype.itemsize != elem_bytes:
        return out
    where = np.asarray(addrs).astype(np.uint64, copy=False).reshape(-1)[lanes]
    near = storage.distance(where) <= STRAY_READ_BYTES
    raw = flat_out.view(np.uint8).reshape(-1, elem_bytes)
    for lane, addr, ok in zip(lanes.tolist(), where.tolist(), near.tolist()):
        if ok:
            got = _memory.read(int(addr), elem_bytes)
            if got is not None:
                raw[lane] = np.frombuffer(got, dtype=np.uint8)
    return out


def zero_lanes(data: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """A copy of ``data`` with ``lanes`` set to 0: the result an atomic gives for a lane it never performed."""
    out = np.array(data, copy=True)
    if out.shape == lanes.shape:
        out[lanes] = 0
    return out


def scratch_pointers(addrs: np.ndarray, stray: np.ndarray, elem_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Pointers with every stray lane sent to its own zeroed scratch cell, and the scratch (keep it alive).

    ``atomic_cas`` has no mask in the interpreter: the only way to keep it from writing a lane is to give the
    lane a pointer it may write.
    """
    n = int(np.count_nonzero(stray))
    width = max(8, elem_bytes)
    scratch = np.zeros(n * width, dtype=np.uint8)
    out = np.array(addrs, dtype=np.uint64, copy=True)
    out[stray] = np.uint64(scratch.ctypes.data) + np.arange(n, dtype=np.uint64) * np.uint64(width)
    return out, scratch


class RecordedReads:
    """What the out-of-bounds lanes of each load and atomic read at record time, keyed by program and event.

    A CPU replay hands this to its launch; the access hooks overwrite those lanes with the recorded bytes, so
    the replayed kernel computes with the values the recorded one saw, bit for bit, and its trace (which
    keeps the values again) matches. An event whose block shape differs from the record's is left alone:
    the kernel no longer does what was recorded, and the trace comparison says where.
    """

    def __init__(self, entries: dict[tuple[int, int, int, int], tuple[tuple[int, ...], np.ndarray, bytes]]):
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def from_trace(cls, trace: pa.Table | None) -> RecordedReads | None:
        if trace is None or "oob_values" not in trace.column_names or trace.num_rows == 0:
            return None
        import pyarrow.compute as pc

        rows = trace.filter(pc.is_valid(trace.column("oob_values")))
        if rows.num_rows == 0:
            return None
        entries = {}
        cols = rows.select(["pid_x", "pid_y", "pid_z", "event", "shape", "oob_mask", "oob_values"])
        for r in cols.to_pylist():
            shape = tuple(r["shape"])
            n = int(np.prod(shape)) if shape else 1
            if r["oob_mask"] is None:
                continue
            bits = np.unpackbits(np.frombuffer(r["oob_mask"], dtype=np.uint8), count=n).astype(bool)
            key = (r["pid_x"], r["pid_y"], r["pid_z"], r["event"])
            entries[key] = (shape, np.flatnonzero(bits), bytes(r["oob_values"]))
        return cls(entries) if entries else None

    def apply(self, program: tuple[int, int, int], event: int, data: np.ndarray) -> np.ndarray:
        entry = self._entries.get((program[0], program[1], program[2], event))
        if entry is None:
            return data
        shape, lanes, raw = entry
        if tuple(data.shape) != shape or len(raw) != lanes.size * data.dtype.itemsize:
            return data
        out = np.array(data, copy=True)
        out.reshape(-1)[lanes] = np.frombuffer(raw, dtype=out.dtype)
        return out


# -- describing the first out-of-bounds event (for OutOfBoundsError) --------------------------------------------


def describe_first_oob(record: LaunchRecord, launch_ref: Any = None) -> str:
    """One paragraph naming kernel, line, program, argument and how far out of bounds the first event went."""
    from tilelens.store.files.traces import lane_offsets, lane_oob

    s = record.summary
    kernel = record.kernel.name
    counts = (
        f"in all {s.oob_load_lanes:,} load and {s.oob_store_lanes:,} store/atomic lanes out of bounds"
        + (
            f" ({s.dropped_lanes:,} dropped: outside every argument's memory, never written)"
            * bool(s.dropped_lanes)
        )
    )
    names = {a.position: a for a in record.args}
    for src, hit, lanes in (record.config or {}).get("cross_args") or ():
        src_name = names[src].name if src in names else f"#{src}"
        hit_name = names[hit].name if hit in names else f"#{hit}"
        counts += f"; {lanes:,} lanes of {src_name}'s accesses hit {hit_name}'s elements"
    recorded = f"recorded as launch {launch_ref}" if isinstance(launch_ref, int) else "recorded"
    trace = record.trace
    row = None
    if trace is not None and trace.num_rows:
        import pyarrow.compute as pc

        hits = trace.filter(pc.greater(trace.column("oob"), 0))
        if hits.num_rows:
            row = hits.slice(0, 1).to_pylist()[0]
    if row is None:
        return f"TileLens: kernel {kernel}: {counts}; {recorded}"
    offsets = lane_offsets(row)[lane_oob(row)]
    arg = names.get(int(row["arg"]))
    op = str(row["op"])
    line = int(row["line"])
    text = _source_line(record, line)
    pid = (row["pid_x"], row["pid_y"], row["pid_z"])
    where = f"line {line}" + (f" (`{text}`)" if text else "")
    head = f"TileLens: kernel {kernel}: {op} out of bounds at {where}, program {pid}"
    if arg is None:
        detail = f"{int(row['oob'])} of {int(row['active'])} active lanes outside every argument"
    else:
        lo, hi = int(offsets.min()), int(offsets.max())
        numel = _elements(arg.shape, arg.strides)
        how = []
        if hi >= numel:
            how.append(f"{hi - numel + 1:,} elements past its end")
        if lo < 0:
            how.append(f"{-lo:,} elements before its start")
        detail = (
            f"argument {arg.name} ({numel:,} elements): {int(row['oob'])} of {int(row['active'])} active lanes "
            f"outside, element offsets {lo:,}..{hi:,}" + (f", up to {' and '.join(how)}" if how else "")
        )
    return f"{head}, {detail}; {counts}; {recorded}"


def _elements(shape: Any, strides: Any) -> int:
    if not shape:
        return 1
    if any(int(n) == 0 for n in shape):
        return 0
    return 1 + sum((int(n) - 1) * int(st) for n, st in zip(shape, strides or ()))


def _source_line(record: LaunchRecord, line: int) -> str | None:
    lines = record.kernel.source.splitlines()
    index = line - record.kernel.def_line
    return lines[index].strip() if 0 <= index < len(lines) else None
