"""Shared memory of one simulated program (one CTA): host numpy buffers in a shared address space of its own.

``allocate_shared_memory`` gets a zeroed byte buffer at the next 16-byte aligned address of the program's
shared address space (addresses restart at 0 for every program, as on the GPU). A shared-memory descriptor's
handle is a ``SharedView``: a numpy view of that buffer with the descriptor's shape and strides, so ``slice``,
``index`` and ``permute`` are numpy views of the same bytes, and ``_reinterpret`` reads the same bytes as
another dtype and shape. Loads and stores are traced as their own event kinds (``shared_load``,
``shared_store``) with the shared address of every element; they never count as global memory traffic and
are never out of bounds of a kernel argument (a view can only reach its own allocation: numpy refuses
anything else, and the simulator reports it as the kernel's error).

mbarriers live in shared memory too (an ``int64`` allocation per barrier); their state machine is kept beside
the buffer, keyed by the barrier's shared address (see ``barriers.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilelens.core import compat

ALIGN = 16
SHARED_LOAD, SHARED_STORE = "shared_load", "shared_store"


@dataclass
class Allocation:
    address: int  # byte address of the first byte in its memory's address space
    data: np.ndarray  # uint8, the allocation's bytes
    space: str = "shared"  # or "tensor": Blackwell tensor memory, which is never traced


@dataclass
class SharedView:
    """The handle of a Gluon ``shared_memory_descriptor`` in the simulator."""

    alloc: Allocation
    array: np.ndarray  # a view of alloc.data with the element dtype, shape and strides of the descriptor
    dtype: Any  # the Triton element type
    layout: Any = None  # the descriptor's shared layout, when the simulator knows it

    @property
    def byte_offset(self) -> int:
        return int(self.array.__array_interface__["data"][0] - self.alloc.data.__array_interface__["data"][0])

    @property
    def address(self) -> int:
        return self.alloc.address + self.byte_offset

    def addresses(self) -> np.ndarray:
        """The shared byte address of every element, in the view's shape (affine, so traces stay compact)."""
        out = np.full(self.array.shape, self.address, dtype=np.uint64)
        for axis, (n, stride) in enumerate(zip(self.array.shape, self.array.strides)):
            index_shape = [1] * self.array.ndim
            index_shape[axis] = n
            out = out + (np.arange(n, dtype=np.uint64) * np.uint64(stride)).reshape(index_shape)
        return out

    # -- views --------------------------------------------------------------------------------------------

    def sub(self, offsets: list[int], shape: list[int]) -> SharedView:
        lead = self.array.ndim - len(offsets)
        index = (slice(None),) * lead + tuple(slice(o, o + n) for o, n in zip(offsets, shape))
        view = self.array[index]
        if list(view.shape[lead:]) != list(shape):
            raise IndexError(
                f"shared memory slice at {offsets} of shape {shape} "
                f"is outside the descriptor {list(self.array.shape)}"
            )
        return SharedView(self.alloc, view, self.dtype, self.layout)

    def index(self, i: int) -> SharedView:
        if not 0 <= i < self.array.shape[0]:
            raise IndexError(
                f"shared memory index {i} is outside the descriptor's {self.array.shape[0]} entries"
            )
        return SharedView(self.alloc, self.array[i], self.dtype, self.layout)

    def permute(self, order: list[int], layout: Any = None) -> SharedView:
        return SharedView(self.alloc, self.array.transpose(order), self.dtype, layout)

    def reshape(self, shape: list[int], layout: Any = None) -> SharedView:
        view = self.array.view()
        try:
            view.shape = tuple(shape)  # raises instead of silently copying
        except AttributeError:
            raise ValueError(
                f"shared memory of shape {list(self.array.shape)} cannot be viewed as {shape}"
            ) from None
        return SharedView(self.alloc, view, self.dtype, layout)

    def reinterpret(self, dtype: Any, shape: list[int], layout: Any = None) -> SharedView:
        """The same bytes, from the view's first byte on, as ``dtype`` in ``shape`` (row-major)."""
        np_dtype = compat.np_dtype(dtype)
        nbytes = math.prod(shape) * np.dtype(np_dtype).itemsize
        start = self.byte_offset
        if start + nbytes > self.alloc.data.size:
            raise ValueError(
                f"reinterpreting shared memory as {dtype}{list(shape)} needs {nbytes} bytes, "
                f"the allocation has {self.alloc.data.size - start} from there"
            )
        raw = self.alloc.data[start : start + nbytes]
        return SharedView(self.alloc, raw.view(np_dtype).reshape(shape), dtype, layout)


@dataclass
class SharedMemory:
    """The shared memory of one program: allocations and mbarrier states."""

    program: tuple[int, int, int]
    space: str = "shared"
    next_address: int = 0
    barriers: dict[int, Any] = field(default_factory=dict)

    def allocate(self, dtype: Any, shape: list[int], layout: Any = None) -> SharedView:
        np_dtype = np.dtype(compat.np_dtype(dtype))
        nbytes = max(1, math.prod(shape)) * np_dtype.itemsize
        address = -(-self.next_address // ALIGN) * ALIGN
        self.next_address = address + nbytes
        alloc = Allocation(address, np.zeros(nbytes, dtype=np.uint8), self.space)
        array = alloc.data[: math.prod(shape) * np_dtype.itemsize].view(np_dtype).reshape(shape)
        return SharedView(alloc, array, dtype, layout)
