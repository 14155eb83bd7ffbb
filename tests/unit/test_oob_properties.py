"""Property tests: random offsets and masks for load, store and atomic_add, against in-bounds lanes by hand.

The tensor a kernel touches is 64 elements in the middle of a numpy arena of distinct values, made a tensor
with ``torch.from_numpy`` (its storage is exactly those 64 elements). Offsets stay within the arena, so even a
regressed guard would only write into the arena, where the test sees it, never into the worker's heap.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import oob_kernels as k
from tilelens.core.interpreted.trace import TritonTrace
from tilelens.store.files.traces import lane_oob

N, PAD, BLOCK = 64, 4096, 64
REACH = 1024  # offsets reach this far outside the tensor, well inside the arena and the stray-read bound


class Arena:
    def __init__(self, fill: np.ndarray | None = None) -> None:
        self.array = (np.arange(PAD + N + PAD, dtype=np.float32) - PAD) * -1.0 - 0.25  # distinct canaries
        if fill is not None:
            self.array[PAD : PAD + N] = fill
        self.before = self.array.copy()
        self.tensor = torch.from_numpy(self.array[PAD : PAD + N])

    def outside_unchanged(self) -> bool:
        a, b = self.array.view(np.uint32), self.before.view(np.uint32)
        return bool(np.array_equal(a[:PAD], b[:PAD]) and np.array_equal(a[PAD + N :], b[PAD + N :]))


offsets = st.lists(st.integers(-REACH, N + REACH), min_size=BLOCK, max_size=BLOCK)
unique_offsets = st.lists(st.integers(-REACH, N + REACH), min_size=BLOCK, max_size=BLOCK, unique=True)
masks = st.lists(st.booleans(), min_size=BLOCK, max_size=BLOCK)


_traced: dict[int, TritonTrace] = {}


def launch(kernel, *args):
    traced = _traced.get(id(kernel))
    if traced is None:
        traced = _traced[id(kernel)] = TritonTrace(kernel, in_place=False)
    traced[(1,)](*args, BLOCK=BLOCK)
    return traced.records[-1]


def row_of(rec, event: int, op: str) -> dict:
    """The trace row of one event (by index: a stray lane may be attributed to whichever argument is nearest)."""
    (row,) = [r for r in rec.trace.to_pylist() if r["event"] == event]
    assert row["op"] == op
    return row


def stray_bits(row: dict) -> np.ndarray:
    if row["stray_mask"] is None:
        return np.zeros(BLOCK, dtype=bool)
    return np.unpackbits(np.frombuffer(row["stray_mask"], dtype=np.uint8), count=BLOCK).astype(bool)


@settings(max_examples=30, deadline=None)
@given(offs=offsets, mask=masks)
def test_loads(offs: list[int], mask: list[bool]) -> None:
    x = Arena(np.arange(N, dtype=np.float32) * 3.0)
    out = torch.empty(BLOCK)
    off, m = np.array(offs, dtype=np.int32), np.array(mask)
    rec = launch(k.indexed_load, x.tensor, torch.from_numpy(off), torch.from_numpy(m.astype(np.int8)), out)
    # By hand: an active lane reads the arena where it points (in x, or within reach past it, as the stock
    # interpreter would); an inactive lane gets other = -1.
    hand = np.where(m, x.array[PAD + off], np.float32(-1.0)).astype(np.float32)
    assert np.array_equal(out.numpy().view(np.uint32), hand.view(np.uint32))
    outside = m & ((off < 0) | (off >= N))
    row = row_of(rec, 2, "load")  # after the loads of the offsets and the mask
    assert rec.summary.oob_lanes == rec.summary.oob_load_lanes == int(outside.sum())
    assert np.array_equal(lane_oob(row).reshape(-1), outside)
    assert np.array_equal(stray_bits(row), outside)  # x's storage is exactly x
    recorded = np.frombuffer(row["oob_values"] or b"", dtype=np.float32)
    assert np.array_equal(recorded.view(np.uint32), hand[outside].view(np.uint32))


@settings(max_examples=30, deadline=None)
@given(offs=unique_offsets, mask=masks)
def test_stores(offs: list[int], mask: list[bool]) -> None:
    y = Arena(np.zeros(N, dtype=np.float32))
    off, m = np.array(offs, dtype=np.int32), np.array(mask)
    vals = torch.randn(BLOCK)
    rec = launch(k.indexed_store, y.tensor, torch.from_numpy(off), torch.from_numpy(m.astype(np.int8)), vals)
    inside = m & (off >= 0) & (off < N)
    hand = np.zeros(N, dtype=np.float32)
    hand[off[inside]] = vals.numpy()[inside]
    assert np.array_equal(y.tensor.numpy().view(np.uint32), hand.view(np.uint32))
    assert y.outside_unchanged()
    outside = m & ~inside
    row = row_of(rec, 3, "store")
    assert (rec.summary.oob_store_lanes, rec.summary.dropped_lanes) == (int(outside.sum()),) * 2
    assert np.array_equal(stray_bits(row), outside) and row["oob_values"] is None


@settings(max_examples=30, deadline=None)
@given(offs=offsets, mask=masks)
def test_atomic_adds(offs: list[int], mask: list[bool]) -> None:
    y = Arena(np.zeros(N, dtype=np.float32))
    off, m = np.array(offs, dtype=np.int32), np.array(mask)
    old = torch.empty(BLOCK)
    rec = launch(
        k.indexed_atomic_add, y.tensor, torch.from_numpy(off), torch.from_numpy(m.astype(np.int8)), old
    )
    hand, hand_old = np.zeros(N, dtype=np.float32), np.full(BLOCK, -1.0, dtype=np.float32)
    for lane in np.flatnonzero(m):  # lanes apply in order; a dropped lane adds nothing and returns 0
        if 0 <= off[lane] < N:
            hand_old[lane] = hand[off[lane]]
            hand[off[lane]] += 1.0
        else:
            hand_old[lane] = 0.0
    assert np.array_equal(y.tensor.numpy(), hand) and np.array_equal(old.numpy(), hand_old)
    assert y.outside_unchanged()
    outside = m & ((off < 0) | (off >= N))
    row = row_of(rec, 2, "atomic_fadd")
    assert (rec.summary.oob_store_lanes, rec.summary.dropped_lanes) == (int(outside.sum()),) * 2
    assert np.array_equal(stray_bits(row), outside)
    recorded = np.frombuffer(row["oob_values"] or b"", dtype=np.float32)
    assert recorded.tolist() == [0.0] * int(outside.sum())
