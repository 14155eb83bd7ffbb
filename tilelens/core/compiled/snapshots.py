"""Which compiled launches get tensor snapshots, and copying them off the device without stalling it.

A compiled recording (``backend="compiled"``) snapshots according to a :class:`SnapshotPolicy`: ``"all"``
launches, only the ``"first"`` launch of each kernel version per argument shapes, or ``"none"``; optionally only
kernels matching name patterns, and only until a byte budget is spent. A launch without snapshots keeps all its
rows but cannot be replayed (nor traced later).

Copies of CUDA tensors are stream-ordered: before the launch, each argument's reachable span is copied into a
pinned host buffer with ``non_blocking=True`` on the launch's current stream, so the copy is queued before the
kernel and reads what the kernel will read; after the launch the same for the outputs, then an event. Nothing
waits for the copies on the program's thread: the background writer waits for the event before it stores the
bytes. Unchanged tensors are recognised there (``after`` equal to ``before`` is dropped), and content addressing
stores identical bytes once.
"""

from __future__ import annotations

import fnmatch
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from tilelens.core.kernel.arguments import Param, extent, same_bytes, span_copy, unwrap
from tilelens.records import ArgumentRecord, KernelIdentity

SnapshotMode = Literal["all", "first", "none"]
SNAPSHOT_MODES: tuple[SnapshotMode, ...] = ("all", "first", "none")


@dataclass
class SnapshotPolicy:
    """Decides per launch; thread-safe. ``budget_bytes`` counts before + after copies (an upper bound)."""

    mode: SnapshotMode = "all"
    kernels: tuple[str, ...] = ()  # fnmatch patterns on qualname or module.qualname; empty: every kernel
    budget_bytes: int | None = None
    used_bytes: int = 0
    skipped: int = 0  # launches left without snapshots by the filters or the budget
    dropped: int = 0  # launches left without snapshots because the writer's backlog was full (PinnedPool)
    _seen: set[tuple[Any, ...]] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.mode not in SNAPSHOT_MODES:
            raise ValueError(f"snapshots must be one of {', '.join(SNAPSHOT_MODES)}, not {self.mode!r}")
        if self.budget_bytes is not None and self.budget_bytes < 0:
            raise ValueError(f"the snapshot budget must be a number of bytes >= 0, not {self.budget_bytes}")

    def wants(self, identity: KernelIdentity, args: list[ArgumentRecord]) -> bool:
        if self.mode == "none":
            return False
        if self.kernels and not any(
            fnmatch.fnmatchcase(identity.qualname, p) or fnmatch.fnmatchcase(identity.name, p)
            for p in self.kernels
        ):
            self.skipped += 1
            return False
        tensors = [a for a in args if a.kind == "tensor"]
        key = (identity.name, identity.source_sha256, tuple((a.dtype, a.shape, a.strides) for a in tensors))
        nbytes = 2 * sum(_span_bytes(a) for a in tensors)
        with self.lock:
            if self.mode == "first" and key in self._seen:
                return False
            if self.budget_bytes is not None and self.used_bytes + nbytes > self.budget_bytes:
                self.skipped += 1
                return False
            self._seen.add(key)
            self.used_bytes += nbytes
        return True


def _span_bytes(a: ArgumentRecord) -> int:
    if a.shape is None or a.strides is None or a.dtype is None:
        return 0
    if any(n == 0 for n in a.shape):
        return 0
    n = 1 + sum((d - 1) * s for d, s in zip(a.shape, a.strides))
    return n * torch.empty(0, dtype=getattr(torch, a.dtype)).element_size()


@dataclass
class PendingSnapshots:
    """Host copies in flight for one launch; :meth:`finish` (the writer's thread) completes the record."""

    before: dict[int, torch.Tensor] = field(default_factory=dict)  # by parameter position
    after: dict[int, torch.Tensor] = field(default_factory=dict)
    event: Any = None  # a torch.cuda.Event recorded after the last copy; None when every copy was synchronous
    pool: Any = None  # the PinnedPool the device copies' host buffers came from (``tilelens.core.compiled.pinned_pool``)
    leases: list[Any] = field(default_factory=list)
    dropped: bool = False  # the pool refused a slice: the launch keeps no snapshot (``copy_spans``)

    def release(self) -> None:
        """The bytes are stored (or failed): give the pinned slices back to the pool. Idempotent."""
        leases, self.leases = self.leases, []
        for lease in leases:
            self.pool.release(lease)

    def finish(self, records: list[ArgumentRecord]) -> None:
        if self.event is not None:
            self.event.synchronize()
        if self.dropped:
            self.before.clear()
            self.after.clear()
            return
        for rec in records:
            before = self.before.get(rec.position)
            if before is None:
                continue
            rec.before = before
            after = self.after.get(rec.position)
            rec.after = None if after is None or same_bytes(after, before) else after
        self.before.clear()
        self.after.clear()


class BacklogFull(Exception):
    """The pinned pool refused a slice: the writer's backlog of snapshot bytes is at its limit."""


def copy_spans(
    params: list[Param],
    bound: dict[str, Any],
    records: list[ArgumentRecord],
    into: dict[int, torch.Tensor],
    pending: PendingSnapshots | None = None,
) -> bool:
    """Queue a host copy of every tensor argument's span into ``into``; True when a device copy was queued.

    With ``pending.pool`` the host buffers of device tensors are slices of its pinned chunks (leased to
    ``pending`` until the writer releases them), else fresh pinned tensors. Raises :class:`BacklogFull` when
    the pool refuses a slice (the caller releases what ``pending`` leased and drops the launch's snapshots)."""
    queued = False
    for p, rec in zip(params, records):
        if rec.kind != "tensor":
            continue
        t = unwrap(bound[p.name])
        if t.device.type == "cpu":
            into[p.position] = span_copy(t)
            continue
        n = extent(t)
        if pending is not None and pending.pool is not None:
            taken = pending.pool.take(n * t.element_size(), t.dtype)
            if taken is None:
                raise BacklogFull
            host, lease = taken
            pending.leases.append(lease)
        else:
            host = torch.empty(n, dtype=t.dtype, pin_memory=True)
        if n:
            host.copy_(t.detach().as_strided((n,), (1,)), non_blocking=True)
            queued = True
        into[p.position] = host
    return queued


def record_event(records: list[ArgumentRecord]) -> Any:
    """An event after the copies just queued on the current stream of the launch's device."""
    device = next((r.device for r in records if r.kind == "tensor" and r.device and r.device != "cpu"), None)
    if device is None:
        return None
    with torch.cuda.device(torch.device(device)):
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record()
    return event
