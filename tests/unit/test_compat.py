"""The release facts tilelens.core.compat states, checked against the Triton installed (3.6, 3.8 and 3.9 with
scripts/test_triton_version.sh): a release that changes one of them fails here, not deep in a launch."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from triton._C.libtriton import interpreter as cpp

from tilelens.core import compat

TensorHandle = compat.TensorHandle
builder = compat.interpreter_module.interpreter_builder


def _params(name: str) -> list[str]:
    return list(inspect.signature(getattr(compat.InterpreterBuilder, name)).parameters)[1:]  # without self


def test_memory_method_hints_match_the_builders_signatures() -> None:
    load, store = _params("create_masked_load"), _params("create_masked_store")
    assert load[:3] == ["ptrs", "mask", "other"] and store[:3] == ["ptrs", "value", "mask"]
    if compat.CACHE_POLICY_ARGUMENT:
        assert load[3:] == ["cache_policy", "is_volatile"] and store[3:] == ["cache_policy"]
        assert _params("create_descriptor_load")[2:] == ["cache_policy"]
        assert builder.get_cache_policy("cg", "evict_last") is None
    else:
        assert load[3:] == ["cache_modifier", "eviction_policy", "is_volatile"]
        assert store[3:] == ["cache_modifier", "eviction_policy"]
    assert len(compat.LOAD_HINTS) == len(load) - 3 and len(compat.STORE_HINTS) == len(store) - 3


def test_the_hints_run_a_load_and_a_store() -> None:
    x = torch.arange(8, dtype=torch.float32)
    ptrs = TensorHandle(
        (x.data_ptr() + 4 * np.arange(8)).astype(np.uint64), compat.tl.pointer_type(compat.tl.float32)
    )
    mask = TensorHandle(np.arange(8) < 5, compat.tl.int1)
    loaded = compat.interpreter_masked_load(builder, ptrs, mask, None)
    np.testing.assert_array_equal(loaded.data, np.where(np.arange(8) < 5, np.arange(8), 0))
    compat.interpreter_masked_store(builder, ptrs, TensorHandle(-loaded.data, compat.tl.float32), mask)
    assert x.tolist() == [0, -1, -2, -3, -4, 5, 6, 7]


def test_descriptor_fields_construct_the_handle() -> None:
    params = list(inspect.signature(compat.TensorDescHandle.__init__).parameters)[1:]
    assert params[:5] == ["base", "shape", "strides", "block_shape", "padding"]
    assert params[5:] == (["round_f32_to_tf32"] if compat.DESCRIPTOR_TF32 else [])
    pointer = TensorHandle(np.array([1 << 20], dtype=np.uint64), compat.tl.pointer_type(compat.tl.float32))
    scalar = TensorHandle(np.array([16], dtype=np.int64), compat.tl.int64)
    one = TensorHandle(np.array([1], dtype=np.int64), compat.tl.int64)
    desc = compat.TensorDescHandle(pointer, [scalar, scalar], [scalar, one], [4, 4], None)
    assert vars(compat.TensorDescHandle(*compat.descriptor_fields(desc))) == vars(desc)
    _, mask = desc.materialize_pointers([TensorHandle(np.array([0], dtype=np.int32), compat.tl.int32)] * 2)
    assert isinstance(mask, TensorHandle) == compat.DESCRIPTOR_MASK_IS_HANDLE


def test_atomic_load_store_methods_exist_where_compat_says() -> None:
    present = [hasattr(compat.InterpreterBuilder, n) for n in compat.ATOMIC_LOAD_STORE_METHODS]
    assert present == [compat.HAS_ATOMIC_LOAD_STORE] * len(present)
    assert hasattr(compat.tl, "atomic_store") == compat.HAS_ATOMIC_LOAD_STORE


def test_the_block_pointer_fact() -> None:
    source = inspect.getsource(compat.tl.core.make_block_ptr)
    assert ("NotImplementedError" in source) == (not compat.HAS_BLOCK_POINTERS)
    assert compat.NO_BLOCK_POINTERS.startswith(f"Triton {compat.triton.__version__} removed block pointers")


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8])
def test_integer_masks_are_refused_where_compat_says(dtype: type) -> None:
    x = np.arange(1, 9, dtype=np.float32)
    ptrs = (x.ctypes.data + 4 * np.arange(8)).astype(np.uint64)
    mask = np.array([0, 1, 2, 0, 1, 3, 0, 1], dtype=dtype)
    if compat.MASKS_MUST_BE_BOOL:
        with pytest.raises(ValueError, match="mask has unsupported dtype"):
            cpp.load(ptrs, mask, np.zeros(8, np.float32), np.dtype(np.float32))
        with pytest.raises(ValueError, match="mask has unsupported dtype"):
            cpp.store(ptrs, x.copy(), mask)
    else:  # nonzero: active
        loaded = cpp.load(ptrs, mask, np.zeros(8, np.float32), np.dtype(np.float32))
        np.testing.assert_array_equal(loaded, np.where(mask != 0, x, 0))
    loaded = cpp.load(ptrs, mask != 0, np.zeros(8, np.float32), np.dtype(np.float32))
    np.testing.assert_array_equal(loaded, np.where(mask != 0, x, 0))
