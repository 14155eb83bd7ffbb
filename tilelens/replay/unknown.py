"""Reads of unknown elements: what a replay of a sparse snapshot cannot vouch for.

A sparse snapshot (:mod:`tilelens.store.files.sparse`) holds the elements the recorded launch read or wrote; the
rebuilt tensor has zeros elsewhere. Replaying the recorded kernel reads only known elements. A kernel edited
since (``allow_changed``) may read others: its result then rests on zeros the record never saw, so the replay's
own access trace is checked, and each argument whose unknown elements were read is reported instead of a
match or a mismatch that would mean nothing.

Only the in-bounds lanes of loads and atomics attributed to the argument count (offsets are then that
argument's span positions); an out-of-bounds lane is reported by the trace comparison already.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tilelens.replay.rebuild import RebuiltTensor
from tilelens.store.files.arrowbuild import column_numbers


@dataclass(frozen=True)
class UnknownRead:
    """One argument's reads of elements its sparse snapshot does not hold."""

    name: str
    position: int
    elements: int  # distinct unknown elements read
    first: int  # the lowest such span position

    def describe(self) -> str:
        many = f" (and {self.elements - 1} more)" if self.elements > 1 else ""
        return f"{self.name}: read span element {self.first}{many}, which the record does not hold"


def unknown_reads(trace: pa.Table | None, tensors: list[RebuiltTensor]) -> list[UnknownRead]:
    sparse = [rt for rt in tensors if rt.known is not None]
    if trace is None or trace.num_rows == 0 or not sparse:
        return []
    from tilelens.store.files.lanes import LaneDecoder

    ops = trace.column("op").to_pylist()
    reads = np.array([op == "load" or op.startswith("atomic") for op in ops], dtype=bool)
    arg = column_numbers(trace, "arg")
    wanted = {rt.spec.position: rt for rt in sparse}
    if not (reads & np.isin(arg, list(wanted))).any():
        return []  # no load or atomic names a sparse argument (its placeholder unread, say): nothing to decode
    found: dict[int, list[np.ndarray]] = {}
    for chunk in LaneDecoder(trace).chunks():
        keep = chunk.active & ~chunk.oob & reads[chunk.row]
        for position, rt in wanted.items():
            sel = keep & (arg[chunk.row] == position)
            if not sel.any():
                continue
            offsets = np.unique(chunk.offset[sel])
            known = rt.known if rt.known is not None else np.zeros(0, np.int64)
            if known.size:
                pos = np.minimum(np.searchsorted(known, offsets), known.size - 1)
                missing = offsets[known[pos] != offsets]
            else:
                missing = offsets
            if missing.size:
                found.setdefault(position, []).append(missing)
    out = []
    for position, parts in sorted(found.items()):
        missing = np.unique(np.concatenate(parts))
        out.append(UnknownRead(wanted[position].spec.name, position, int(missing.size), int(missing[0])))
    return out
