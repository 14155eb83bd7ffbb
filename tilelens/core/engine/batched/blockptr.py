"""Block pointers over the program axis, where the interpreter's builder makes them itself.

Triton 3.6 and 3.7 build a block pointer in the interpreter builder (``create_make_block_ptr``,
``create_advance``, ``create_tensor_pointer_load`` / ``_store`` over a ``BlockPointerHandle``); 3.8 and later
build it in ``tl.core`` from plain operations, which the batched engine runs already. Without this module a
block pointer at a program-dependent offset (``(pid * BM, 0)``, the usual case) sent such a launch back to one
program at a time, slower than the stock interpreter.

A block pointer whose base, shape, strides or offsets differ between programs is a
:class:`BatchedBlockPointer`. Invariants:

* its fields are the stock handle's fields, each a stock handle (scalars of shape ``(1,)``) or a
  ``BatchedHandle`` (``(B, 1)``);
* ``materialize_pointers`` gives, for program ``b`` at index ``b``, what the stock
  ``BlockPointerHandle.materialize_pointers`` gives for that program: the same numpy operations in the same
  order on arrays of the same dtypes, with the program axis in front (pointers a ``BatchedHandle``, masks an
  array, as the stock method returns them);
* ``advance`` adds into a copy that keeps each offset's dtype, as the stock clone-then-``+=`` does;
* the stock ``create_tensor_pointer_load`` / ``_store`` only call ``materialize_pointers`` and the builder's
  masked load / store, so they run unchanged over a batched block pointer, into the engine's batched memory
  methods (whose access hooks record every lane as the per-program run does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tilelens.core.engine.batched.state import BatchedHandle, BatchState, TensorHandle, has_batched, mark


def _field(h: Any, ndim: int) -> Any:
    """``h``'s data ready to broadcast against ``ndim``-dimensional blocks, the program axis in front."""
    if type(h) is BatchedHandle:
        data = np.asarray(h.data)
        return data.reshape((data.shape[0],) + (1,) * ndim)
    return h.data


class BatchedBlockPointer:
    """The interpreter's ``BlockPointerHandle`` with fields that may differ between programs."""

    def __init__(
        self,
        base: Any,
        shape: list[Any],
        strides: list[Any],
        offsets: list[Any],
        block_shape: Any,
        order: Any,
        size: int,
    ) -> None:
        self.base, self.shape, self.strides, self.offsets = base, list(shape), list(strides), list(offsets)
        self.block_shape, self.order, self.size = block_shape, order, size

    def materialize_pointers(self, boundary_check: Any) -> tuple[Any, np.ndarray]:
        block = tuple(self.block_shape)
        ndim = len(block)
        full = (self.size, *block)
        n_bytes = self.base.get_element_ty().primitive_bitwidth // 8
        ptrs = np.broadcast_to(_field(self.base, ndim), full if type(self.base) is BatchedHandle else block)
        masks: np.ndarray = np.ones(block, dtype=bool)
        for dim in range(ndim):
            bcast = [1] * ndim
            bcast[dim] = block[dim]
            offset = self.offsets[dim]
            off = offset.data + np.arange(block[dim])
            off = off.reshape((self.size, *bcast) if type(offset) is BatchedHandle else bcast)
            ptrs = ptrs + (n_bytes * off * _field(self.strides[dim], ndim)).astype(np.uint64)
            if dim in boundary_check:
                masks = masks & (off < _field(self.shape[dim], ndim)) & (off >= 0)
        out = TensorHandle(np.broadcast_to(ptrs, full), self.base.dtype.scalar)
        return mark(out), np.ascontiguousarray(np.broadcast_to(masks, full))


def _advanced(old: Any, inc: Any) -> Any:
    """``old + inc`` in ``old``'s dtype (the stock ``clone`` then in-place ``+=``), batched if either is."""
    shape = np.broadcast_shapes(np.shape(old.data), np.shape(inc.data))
    data = np.array(np.broadcast_to(old.data, shape))
    data += inc.data
    out = TensorHandle(data, old.dtype)
    return mark(out) if BatchedHandle in (type(old), type(inc)) else out


def impls(installed: dict[str, Callable[..., Any]], state: BatchState) -> dict[str, Callable[..., Any]]:
    """Batched ``create_make_block_ptr`` and ``create_advance``, where this Triton's builder has them."""
    if "create_make_block_ptr" not in installed or "create_advance" not in installed:
        return {}
    make, advance = installed["create_make_block_ptr"], installed["create_advance"]

    def make_block_ptr(
        self: Any, base: Any, shape: Any, strides: Any, offsets: Any, block_shape: Any, order: Any
    ) -> Any:
        if not has_batched((base, shape, strides, offsets)):
            return make(self, base, shape, strides, offsets, block_shape, order)
        # no copies of the offsets: nothing here changes a handle in place (the stock clones them for its +=)
        return BatchedBlockPointer(base, shape, strides, offsets, block_shape, order, state.size)

    def advance_ptr(self: Any, ptr: Any, offsets: Any) -> Any:
        if type(ptr) is not BatchedBlockPointer and not has_batched((offsets,)):
            return advance(self, ptr, offsets)
        if len(ptr.offsets) != len(offsets):
            raise ValueError("len(ptr.offsets) != len(offsets)")
        moved = [_advanced(old, inc) for old, inc in zip(ptr.offsets, offsets)]
        return BatchedBlockPointer(
            ptr.base, ptr.shape, ptr.strides, moved, ptr.block_shape, ptr.order, state.size
        )

    out: dict[str, Callable[..., Any]] = {
        "create_make_block_ptr": make_block_ptr,
        "create_advance": advance_ptr,
    }
    # The stock load / store only materialise the pointer and call the builder's (batched) masked load /
    # store: right for a batched pointer, a batched stored value, or both; the engine must not refuse them.
    for name in ("create_tensor_pointer_load", "create_tensor_pointer_store"):
        if name in installed:
            out[name] = installed[name]
    return out
