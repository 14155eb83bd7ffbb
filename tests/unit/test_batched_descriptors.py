"""A batched tensor descriptor's pointers and mask are, program by program, the stock descriptor's."""

from __future__ import annotations

import numpy as np
import pytest

from tilelens.core import compat
from tilelens.core.engine.batched.descriptors import BatchedDescriptor
from tilelens.core.engine.batched.state import BatchedHandle, TensorHandle

tl = compat.tl
builder = compat.interpreter_module.interpreter_builder


def _scalar(value: int, dtype: object = tl.int32) -> object:
    return TensorHandle(np.array([value], dtype=compat.np_dtype(dtype)), dtype)


def _descriptor(shape: list[int], block: list[int], padding: object) -> object:
    strides = [int(np.prod(shape[d + 1 :])) for d in range(len(shape))]
    base = TensorHandle(np.array([1 << 20], dtype=np.uint64), tl.pointer_type(tl.float32))
    return compat.TensorDescHandle(
        base, [_scalar(n, tl.int64) for n in shape], [_scalar(s, tl.int64) for s in strides], block, padding
    )


def _mask(mask: object) -> np.ndarray:
    if compat.DESCRIPTOR_MASK_IS_HANDLE:
        assert type(mask) is TensorHandle and mask.dtype == tl.int1
        return np.asarray(mask.data)
    assert type(mask) is np.ndarray
    return mask


@pytest.mark.parametrize(("shape", "block"), [([70, 48], [32, 16]), ([5, 9, 12], [2, 4, 4]), ([100], [32])])
def test_each_programs_pointers_and_mask_are_the_stock_ones(shape: list[int], block: list[int]) -> None:
    rng = np.random.default_rng(0)
    size = 5
    desc = _descriptor(shape, block, None)
    # per dimension: offsets that differ between programs (some past the end, some negative), or one for all
    offsets: list[object] = []
    for dim, n in enumerate(shape):
        if dim % 2 == 0:
            values = rng.integers(-block[dim], n + block[dim], size=size) // 4 * 4  # 16-byte aligned
            offsets.append(BatchedHandle(values.astype(np.int32).reshape(size, 1), tl.int32))
        else:
            offsets.append(_scalar(4))
    batched = BatchedDescriptor(desc, size)
    ptrs, mask = batched.materialize_pointers(offsets)
    assert type(ptrs) is BatchedHandle and ptrs.data.shape == (size, *block)
    assert ptrs.dtype == desc.base.dtype.scalar
    masks = _mask(mask)
    for b in range(size):
        own = [_scalar(int(o.data[b, 0])) if type(o) is BatchedHandle else o for o in offsets]
        stock_ptrs, stock_mask = desc.materialize_pointers(own)
        assert ptrs.data[b].dtype == stock_ptrs.data.dtype
        np.testing.assert_array_equal(ptrs.data[b], stock_ptrs.data)
        np.testing.assert_array_equal(masks[b], _mask(stock_mask))


def test_an_unaligned_program_fails_the_check_as_the_stock_one_does() -> None:
    desc = _descriptor([32, 16], [8, 8], None)
    offsets = [_scalar(0), BatchedHandle(np.array([[0], [3], [8]], dtype=np.int32), tl.int32)]
    with pytest.raises(AssertionError, match="block offset start must be 16-byte aligned"):
        desc.materialize_pointers([_scalar(0), _scalar(3)])
    with pytest.raises(AssertionError, match="block offset start must be 16-byte aligned"):
        BatchedDescriptor(desc, 3).materialize_pointers(offsets)
    aligned = [_scalar(0), BatchedHandle(np.array([[0], [4], [8]], dtype=np.int32), tl.int32)]
    BatchedDescriptor(desc, 3).materialize_pointers(aligned)


def test_the_copy_keeps_every_field() -> None:
    desc = _descriptor([32, 16], [8, 8], "zero")
    copy = BatchedDescriptor(desc, 3)
    assert isinstance(copy, compat.TensorDescHandle) and copy.size == 3
    assert {k: v for k, v in vars(copy).items() if k != "size"} == vars(desc)
