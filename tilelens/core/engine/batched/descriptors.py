"""Tensor descriptors over the program axis: loads and stores at program-dependent block offsets.

A tensor descriptor (``tl.make_tensor_descriptor``, or a host ``TensorDescriptor`` argument) is the same for
every program in the usual kernel; the offsets of its loads and stores are not (``desc.load([pid * BM, 0])``).
Triton 3.9 removed block pointers in favour of descriptors, so without this module such a launch ran one
program at a time. The stock ``create_descriptor_load`` / ``_store`` (3.6 through 3.9) only call the
descriptor's ``materialize_pointers(offsets)``, the builder's masked load / store, and (3.9, loads) a tf32
rounding of the result; so they run unchanged over a :class:`BatchedDescriptor`, into the engine's batched
memory methods (whose access hooks record every lane as the per-program run does).

Invariants:

* ``BatchedDescriptor.materialize_pointers`` gives, for program ``b`` at index ``b``, what the stock
  ``TensorDescHandle.materialize_pointers`` gives for that program: the same numpy operations in the same order
  on arrays of the same dtypes, the program axis in front (pointers a ``BatchedHandle``, the mask in this
  release's container, ``compat.descriptor_mask``); its alignment check fails exactly when one program's does;
* a descriptor whose own fields differ between programs (base, shape or strides computed from the program id)
  is refused, as are gathers and scatters (the stock ones loop over the rows in Python).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tilelens.core import compat
from tilelens.core.engine.batched.state import BatchedHandle, BatchState, TensorHandle, has_batched, mark


def _offset(h: Any, n: int, bcast: list[int], size: int) -> np.ndarray:
    """The stock ``(offsets[dim].data + np.arange(n)).reshape(bcast)``, the program axis in front if batched."""
    off: np.ndarray = h.data + np.arange(n)  # a batched scalar (B, 1) gives (B, n)
    return off.reshape((size, *bcast) if type(h) is BatchedHandle else bcast)


class BatchedDescriptor(compat.TensorDescHandle):  # type: ignore[misc]
    """The interpreter's ``TensorDescHandle``, its loads and stores at offsets that differ between programs."""

    def __init__(self, desc: Any, size: int) -> None:
        super().__init__(*compat.descriptor_fields(desc))
        self.size = size

    def materialize_pointers(self, offsets: list[Any]) -> tuple[Any, Any]:
        assert len(offsets) == self.ndim
        itemsize = self.base.dtype.element_ty.primitive_bitwidth // 8
        aligned = (offsets[-1].data * itemsize) % 16 == 0
        assert bool(np.all(aligned)), "block offset start must be 16-byte aligned"
        block = list(self.block_shape)
        ptrs = np.broadcast_to(self.base.data, block)
        masks: Any = np.ones(block, dtype=bool)
        for dim in range(len(block)):
            bcast = [1] * len(block)
            bcast[dim] = block[dim]
            off = _offset(offsets[dim], block[dim], bcast, self.size)
            ptrs = ptrs + (itemsize * off * self.strides[dim].data).astype(np.uint64)
            masks = masks & (off >= 0) & (off < self.shape[dim].data)
        assert ptrs.dtype == np.uint64
        full = (self.size, *block)
        out = mark(TensorHandle(np.broadcast_to(ptrs, full), self.base.dtype.scalar))
        return out, compat.descriptor_mask(np.ascontiguousarray(np.broadcast_to(masks, full)))


def impls(installed: dict[str, Callable[..., Any]], state: BatchState) -> dict[str, Callable[..., Any]]:
    """Batched ``create_descriptor_load`` / ``create_descriptor_store``, where this Triton's builder has them."""
    if "create_descriptor_load" not in installed or "create_descriptor_store" not in installed:
        return {}
    load, store = installed["create_descriptor_load"], installed["create_descriptor_store"]

    def batched(desc: Any, indices: Any) -> Any:
        return BatchedDescriptor(desc, state.size) if has_batched((indices,)) else desc

    def descriptor_load(self: Any, desc: Any, indices: Any, *rest: Any, **kw: Any) -> Any:
        # Memory differs between programs: the result is batched even at offsets the same for every program
        # (3.9's tf32 rounding hands back a new, unmarked handle).
        return mark(load(self, batched(desc, indices), indices, *rest, **kw))

    def descriptor_store(self: Any, desc: Any, value: Any, indices: Any, *rest: Any, **kw: Any) -> Any:
        return store(self, batched(desc, indices), value, indices, *rest, **kw)

    return {"create_descriptor_load": descriptor_load, "create_descriptor_store": descriptor_store}
