"""Large loads and stores inside one argument storage, done by numpy instead of Triton's per-lane C++ loop.

Triton's interpreter reads and writes memory lane by lane (``interpreter.load``/``store``: one ``memcpy`` per
lane, about 10-25 ns each). A batched launch hands it whole ``(programs, *block)`` blocks, where that loop is
a large part of the launch. For a block whose active lanes all lie in one argument storage (the access hooks'
bounds guard has found no stray lane), at element-aligned offsets, one numpy gather or scatter over a typed
view of that storage moves the same bytes:

* load: lane ``i`` of the result holds the element at ``ptrs[i]`` where ``mask[i]``, else ``other[i]`` (zero
  without ``other``), in a new C-contiguous array of the element's numpy type: exactly what
  ``interpreter.load`` returns;
* store: the element at ``ptrs[i]`` becomes ``value[i]`` for every active lane. ``interpreter.store`` goes
  through the lanes in order, so where two lanes hit one address the later one wins; numpy gives no order
  for repeated indices, so only blocks whose active addresses strictly increase (no repeats) are stored here.

Anything else (small blocks, where numpy's fixed cost exceeds the loop's; other shapes or dtypes than the
C++ functions are given in the common case; misaligned lanes; lanes in two storages) returns None / False,
and the caller runs Triton's own method. Nothing here decides what is in bounds: the caller's guard has.
"""

from __future__ import annotations

import bisect
import ctypes
from typing import Any

import numpy as np

# Fewer lanes than this: Triton's loop is cheaper than numpy's fixed cost.
MIN_LANES = 2048


class StorageViews:
    """Typed numpy views of argument storages, made once per (storage, dtype) for the length of a launch."""

    def __init__(self) -> None:
        self._views: dict[tuple[int, int, np.dtype[Any]], np.ndarray] = {}

    def view(self, start: int, end: int, dtype: np.dtype[Any]) -> np.ndarray:
        key = (start, end, dtype)
        found = self._views.get(key)
        if found is None:
            count = (end - start) // dtype.itemsize
            raw = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(start)
            found = self._views[key] = np.ctypeslib.as_array(raw).view(dtype)
        return found


def _indices(
    storage: Any, views: StorageViews, addrs: np.ndarray, dtype: np.dtype[Any]
) -> tuple[np.ndarray, np.ndarray] | None:
    """(typed view of the one storage holding every lane of ``addrs``, element index of each lane), or None."""
    eb = dtype.itemsize
    if eb & (eb - 1):
        return None
    lanes = addrs.view(
        np.int64
    )  # addresses of host memory are below 2**63: the same values, faster arithmetic
    lo = int(lanes.min())
    hi = int(lanes.max()) + eb
    i = bisect.bisect_right(storage.starts, lo) - 1
    if lo < 0 or i < 0 or hi > storage.ends[i]:
        return None
    start = storage.starts[i]
    offsets = lanes - start
    if eb > 1 and bool((offsets & (eb - 1)).any()):
        return None  # a lane between elements of the view
    offsets >>= eb.bit_length() - 1  # element sizes are powers of two
    return views.view(start, storage.ends[i], dtype), offsets


def _same_shape(data: Any, shape: tuple[int, ...], dtype: Any) -> bool:
    return type(data) is np.ndarray and data.shape == shape and data.dtype == dtype


def _block(
    storage: Any, views: StorageViews, ptrs: Any, mask: Any, dtype: Any, data: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool] | None:
    """(typed storage view, element index of each active lane, the mask, whether every lane is active) for a
    block this path takes, or None. ``data`` (None: nothing to check) must have the block's shape and ``dtype``."""
    addrs = ptrs.data
    if type(addrs) is not np.ndarray or addrs.size < MIN_LANES or addrs.dtype != np.uint64:
        return None
    shape = addrs.shape
    active: Any = getattr(mask, "data", None)
    if not _same_shape(active, shape, np.bool_):
        return None
    if data is not None and not _same_shape(data, shape, dtype):
        return None
    every = bool(active.all())
    lanes = addrs.reshape(-1) if every else addrs[active]
    if lanes.size == 0:
        return None
    found = _indices(storage, views, lanes, dtype)
    if found is None:
        return None
    return found[0], found[1], active, every


def load(
    storage: Any, views: StorageViews, ptrs: Any, mask: Any, other: Any, dtype: Any
) -> np.ndarray | None:
    """What ``interpreter.load(ptrs, mask, other, dtype)`` returns, or None where this path does not apply."""
    dtype = np.dtype(dtype)
    other_data = None if other is None else getattr(other, "data", None)
    if other is not None and other_data is None:
        return None
    block = _block(storage, views, ptrs, mask, dtype, other_data)
    if block is None:
        return None
    view, idx, active, every = block
    values: np.ndarray = view[idx]  # a gather: a new array, never a view of memory
    if every:
        gathered: np.ndarray = values.reshape(active.shape)
        return gathered
    out = (
        np.zeros(active.shape, dtype=dtype) if other is None else np.array(other_data, dtype=dtype, order="C")
    )
    out[active] = values
    return out


def store(storage: Any, views: StorageViews, ptrs: Any, value: Any, mask: Any, dtype: Any) -> bool:
    """Do what ``interpreter.store(ptrs, value, mask)`` does and return True, or False (nothing written)."""
    dtype = np.dtype(dtype)
    values: Any = getattr(value, "data", None)
    if values is None:
        return False
    block = _block(storage, views, ptrs, mask, dtype, values)
    if block is None:
        return False
    view, idx, active, every = block
    if idx.size > 1 and not bool((idx[1:] > idx[:-1]).all()):
        return False  # repeated (or unordered) addresses: the lane order decides, as Triton's loop does
    view[idx] = values.reshape(-1) if every else values[active]
    return True
