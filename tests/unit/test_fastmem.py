"""Large loads and stores by numpy (tilelens.core.engine.fastmem) move exactly the bytes Triton's C++ loop moves."""

from __future__ import annotations

import numpy as np
import pytest

from tilelens.core import compat
from tilelens.core.engine import fastmem
from tilelens.core.kernel.spans import StorageTable

tl = compat.tl
TensorHandle = compat.TensorHandle
builder = compat.interpreter_module.interpreter_builder
N = fastmem.MIN_LANES * 2


def _stock_load(ptrs: object, mask: object, other: object) -> np.ndarray:
    return np.asarray(compat.interpreter_masked_load(builder, ptrs, mask, other).data)


def _ptrs(addrs: np.ndarray, element: object) -> object:
    return TensorHandle(np.ascontiguousarray(addrs, dtype=np.uint64), tl.pointer_type(element))


def _mask(values: np.ndarray) -> object:
    return TensorHandle(np.ascontiguousarray(values, dtype=bool), tl.int1)


@pytest.mark.parametrize(
    ("element", "np_type"),
    [
        (tl.float32, np.float32),
        (tl.int16, np.int16),
        (tl.bfloat16, np.uint16),
        (tl.int1, np.bool_),
        (tl.int64, np.int64),
    ],
)
def test_loads_equal_the_interpreters(element: object, np_type: type) -> None:
    rng = np.random.default_rng(0)
    arena = rng.integers(0, 256, size=(N + 64) * 8, dtype=np.uint8)  # raw bytes, any bit pattern
    base = arena.ctypes.data
    table = StorageTable([(base, base + arena.nbytes)])
    eb = np.dtype(np_type).itemsize
    shapes = {"flat": (N,), "batched": (4, N // 4)}
    for shape in shapes.values():
        contiguous = (base + eb * (3 + np.arange(N))).reshape(shape)
        gathered = (base + eb * rng.integers(0, N + 64, size=N)).reshape(shape)
        for addrs in (contiguous, gathered):
            ptrs = _ptrs(addrs, element)
            every = _mask(np.ones(shape, dtype=bool))
            some = _mask(rng.random(shape) < 0.5)
            other = TensorHandle(rng.integers(0, 2, size=shape).astype(np_type), element)
            for mask, alt in ((every, None), (some, None), (some, other)):
                stock = _stock_load(ptrs, mask, alt)
                fast = fastmem.load(table, fastmem.StorageViews(), ptrs, mask, alt, np.dtype(np_type))
                assert fast is not None
                assert fast.dtype == stock.dtype and fast.shape == stock.shape and fast.flags.c_contiguous
                assert fast.tobytes() == stock.tobytes()


def test_loads_it_does_not_take() -> None:
    arena = np.zeros(N * 2, dtype=np.float32)
    other_arena = np.zeros(N, dtype=np.float32)
    base = arena.ctypes.data
    table = StorageTable(
        [(base, base + arena.nbytes), (other_arena.ctypes.data, other_arena.ctypes.data + 4 * N)]
    )
    views = fastmem.StorageViews()
    f32 = np.dtype(np.float32)
    every = _mask(np.ones(N, dtype=bool))
    lanes = base + 4 * np.arange(N)
    assert fastmem.load(table, views, _ptrs(lanes + 2, tl.float32), every, None, f32) is None  # misaligned
    small = _mask(np.ones(16, dtype=bool))
    assert fastmem.load(table, views, _ptrs(lanes[:16], tl.float32), small, None, f32) is None  # too few
    two = np.concatenate([lanes[: N // 2], other_arena.ctypes.data + 4 * np.arange(N // 2)])
    assert fastmem.load(table, views, _ptrs(two, tl.float32), every, None, f32) is None  # two storages
    past = lanes + 4 * N + 4  # the last lanes run past the arena's end
    assert fastmem.load(table, views, _ptrs(past, tl.float32), every, None, f32) is None
    wrong = TensorHandle(np.zeros(N, dtype=np.float64), tl.float64)
    assert fastmem.load(table, views, _ptrs(lanes, tl.float32), every, wrong, f32) is None  # other's type


def test_stores_equal_the_interpreters_and_refuse_repeated_addresses() -> None:
    rng = np.random.default_rng(1)
    f32 = np.dtype(np.float32)
    for shape in ((N,), (8, N // 8)):
        stock_arena = rng.standard_normal(N + 8).astype(np.float32)
        fast_arena = stock_arena.copy()
        values = rng.standard_normal(shape).astype(np.float32)
        active = rng.random(shape) < 0.7
        for arena_name in ("stock", "fast"):
            arena = stock_arena if arena_name == "stock" else fast_arena
            base = arena.ctypes.data
            table = StorageTable([(base, base + arena.nbytes)])
            ptrs = _ptrs((base + 4 * (5 + np.arange(N))).reshape(shape), tl.float32)
            val = TensorHandle(values, tl.float32)
            if arena_name == "stock":
                compat.interpreter_masked_store(builder, ptrs, val, _mask(active))
            else:
                assert fastmem.store(table, fastmem.StorageViews(), ptrs, val, _mask(active), f32)
        assert fast_arena.tobytes() == stock_arena.tobytes()
    arena = np.zeros(N, dtype=np.float32)
    base = arena.ctypes.data
    table = StorageTable([(base, base + arena.nbytes)])
    repeated = base + 4 * (np.arange(N) // 2)  # two lanes per address: the later one must win, in order
    val = TensorHandle(np.arange(N, dtype=np.float32), tl.float32)
    every = _mask(np.ones(N, dtype=bool))
    assert not fastmem.store(table, fastmem.StorageViews(), _ptrs(repeated, tl.float32), val, every, f32)
    assert not arena.any()  # refused: nothing written
    backwards = base + 4 * (N - 1 - np.arange(N))
    assert not fastmem.store(table, fastmem.StorageViews(), _ptrs(backwards, tl.float32), val, every, f32)
