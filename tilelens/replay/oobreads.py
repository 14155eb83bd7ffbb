"""What a launch's out-of-bounds lanes read at record time, brought back for a replay.

The recorded trace keeps, per load or atomic event, the raw bytes its out-of-bounds lanes read
(``oob_values``). A CPU replay feeds them straight back to the same lanes (``cpu_reads``); nothing about the
memory around the rebuilt tensors matters then. A compiled kernel on a GPU cannot be fed, so ``gpu_layout``
works out where those bytes must lie instead: each storage group is rebuilt inside a larger buffer with
``STRAY_READ_BYTES`` of margin on both sides, and each recorded byte goes where its lane will read it. Lanes
out of bounds further than that margin cannot be reproduced on a GPU: the replay refuses to run the launch
there (a compiled kernel would read or write memory the replay does not own), and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilelens.core.engine.bounds import STRAY_READ_BYTES, RecordedReads
from tilelens.store.files.tensors import DTYPES
from tilelens.store.files.traces import lane_offsets
from tilelens.store.read.launches import ArgSpec, LaunchSpec

# Room around every storage group on a GPU replay; a multiple of every element size.
GPU_MARGIN_BYTES = STRAY_READ_BYTES


def cpu_reads(trace: Any) -> RecordedReads | None:
    """The recorded out-of-bounds reads to feed a CPU replay; None when there are none (or an old trace)."""
    return RecordedReads.from_trace(trace)


@dataclass
class GpuLayout:
    """Recorded bytes to place around each storage group (byte offsets from the group's storage start)."""

    pieces: dict[Any, list[tuple[int, bytes]]] = field(default_factory=dict)
    unreachable_loads: int = 0  # out-of-bounds load/atomic lanes further than the margin
    unreachable_stores: int = 0  # out-of-bounds store/atomic lanes further than the margin

    def problem(self, launch_id: int) -> str | None:
        if not (self.unreachable_loads or self.unreachable_stores):
            return None
        parts = []
        if self.unreachable_loads:
            parts.append(f"{self.unreachable_loads:,} lanes read")
        if self.unreachable_stores:
            parts.append(f"{self.unreachable_stores:,} lanes wrote")
        return (
            f"launch {launch_id}: its stray accesses cannot be reproduced on a GPU: {' and '.join(parts)} memory "
            f"more than {GPU_MARGIN_BYTES // 1024} KiB outside their argument's storage at record time; "
            "replay it on the CPU (--device cpu), which feeds the recorded values back"
        )


def group_key(a: ArgSpec) -> Any:
    return a.storage_group if a.storage_group is not None else ("alone", a.position)


def gpu_layout(trace: Any, spec: LaunchSpec) -> GpuLayout:
    """Where each out-of-bounds lane's recorded bytes must lie for a compiled kernel to read them."""
    layout = GpuLayout()
    if trace is None or trace.num_rows == 0 or "oob" not in trace.column_names:
        return layout
    import pyarrow.compute as pc

    rows = trace.filter(pc.greater(trace.column("oob"), 0))
    if rows.num_rows == 0:
        return layout
    tensors = {a.position: a for a in spec.args if a.kind == "tensor"}
    sizes = _group_sizes(tensors.values())
    seen: set[tuple[Any, int]] = set()
    has_values = "oob_values" in rows.column_names
    for row in rows.to_pylist():
        arg = tensors.get(int(row["arg"]))
        reads, writes = row["op"] != "store", row["op"] != "load"  # atomics do both
        shape = tuple(row["shape"])
        n = int(np.prod(shape)) if shape else 1
        bits = np.unpackbits(np.frombuffer(row["oob_mask"], dtype=np.uint8), count=n).astype(bool)
        lanes = np.flatnonzero(bits)
        if arg is None or arg.storage_offset is None or arg.dtype not in DTYPES:
            layout.unreachable_loads += lanes.size * reads
            layout.unreachable_stores += lanes.size * writes
            continue
        key = group_key(arg)
        itemsize = DTYPES[arg.dtype].itemsize
        eb = int(row["elem_bytes"])
        where = arg.storage_offset * itemsize + lane_offsets(row).reshape(-1)[lanes] * itemsize
        reach = (where >= -GPU_MARGIN_BYTES) & (where + eb <= sizes[key] + GPU_MARGIN_BYTES)
        missed = int(np.count_nonzero(~reach))
        layout.unreachable_loads += missed * reads
        layout.unreachable_stores += missed * writes
        raw = row.get("oob_values") if has_values else None
        if not reads or raw is None or len(raw) != lanes.size * eb:
            continue
        values = np.frombuffer(raw, dtype=np.uint8).reshape(-1, eb)
        pieces = layout.pieces.setdefault(key, [])
        for pos, ok, value in zip(where.tolist(), reach.tolist(), values):
            # The first read of an address is what memory held before the kernel wrote anything there.
            if ok and (key, pos) not in seen:
                seen.add((key, pos))
                pieces.append((int(pos), value.tobytes()))
    return layout


def _group_sizes(tensors: Any) -> dict[Any, int]:
    """Bytes each storage group is rebuilt with (see tilelens.replay.rebuild.storage_size)."""
    from tilelens.replay.rebuild import storage_size

    members: dict[Any, list[ArgSpec]] = {}
    for a in tensors:
        members.setdefault(group_key(a), []).append(a)
    return {key: storage_size(group) for key, group in members.items()}
