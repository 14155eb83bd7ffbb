"""NVIDIA-specific Gluon operations in the simulator: mbarriers, cp.async, TMA, wgmma and tcgen05.

Everything asynchronous completes when it is issued: a TMA copy moves its whole box at once and then takes its
bytes off the barrier, ``warpgroup_mma(is_async=True)`` computes its result immediately and
``warpgroup_mma_wait`` hands it back, ``tcgen05_mma`` writes its accumulator and arrives on its barriers. A
kernel that is correct on the GPU (every wait covers the operation it waits for) computes the same values
this way; waits, fences and commit groups have nothing left to wait for.

Global memory is reached only through the interpreter builder's masked load/store/atomic methods, so a TMA
box is one access event of the box's shape in the trace (affine, with the out-of-bounds part of the box masked
off, as the hardware clips it), attributed to the descriptor's tensor like any Triton access. Shared-memory
operands and results are traced as shared events. Tensor memory (Blackwell) is neither global nor shared
memory and is not traced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from tilelens.core import compat
from tilelens.core.engine.gluon.shared import SHARED_LOAD, SHARED_STORE, SharedMemory, SharedView

TensorHandle = compat.TensorHandle


@dataclass
class SimDescriptor:
    """A TMA tensor descriptor: a global tensor (base address, shape, strides in elements) and its box."""

    base: int
    element: Any  # Triton element type
    shape: list[int]
    strides: list[int]
    block_shape: list[int]
    padding: str = "zero"

    @property
    def itemsize(self) -> int:
        return cast(int, max(1, self.element.primitive_bitwidth // 8))

    @property
    def box_bytes(self) -> int:
        return math.prod(self.block_shape) * self.itemsize

    def box(self, coords: list[int]) -> tuple[Any, Any]:
        """Pointers and in-bounds mask of the box at ``coords`` (the hardware clips the rest)."""
        ndim = len(self.block_shape)
        if len(coords) != ndim:
            raise ValueError(f"TMA coordinates {coords} do not match the descriptor's {ndim} dimensions")
        offsets = np.zeros(self.block_shape, dtype=np.int64)
        mask = np.ones(self.block_shape, dtype=bool)
        for dim in range(ndim):
            index_shape = [1] * ndim
            index_shape[dim] = self.block_shape[dim]
            idx = (coords[dim] + np.arange(self.block_shape[dim], dtype=np.int64)).reshape(index_shape)
            offsets = offsets + idx * self.strides[dim]
            mask = mask & (idx >= 0) & (idx < self.shape[dim])
        addresses = (np.int64(self.base) + offsets * self.itemsize).astype(np.uint64)
        ptr_type = compat.tl.pointer_type(self.element)
        return TensorHandle(addresses, ptr_type), TensorHandle(mask, compat.tl.int1)


def _int(handle: Any) -> int:
    return int(np.asarray(handle.data).reshape(-1)[0])


def _flag(handle: Any) -> bool:
    if not isinstance(handle, TensorHandle):
        return True
    return bool(np.asarray(handle.data).reshape(-1)[0])


class NvidiaOps:
    """Mixed into ``GluonSimBuilder``: ``self._base`` is the interpreter builder, ``self.state`` the
    launch."""

    _base: Any
    state: Any

    @property
    def program(self) -> tuple[int, int, int]:
        raise NotImplementedError

    # -- mbarriers -------------------------------------------------------------------------------------------

    def create_mbarrier_init(self, bar: SharedView, count: int) -> None:
        self.state.init_barrier(bar, int(count), self.program)

    def create_mbarrier_inval(self, bar: SharedView) -> None:
        self.state.invalidate_barrier(bar, self.program)

    def create_mbarrier_expect(self, bar: SharedView, nbytes: int, pred: Any = None, *rest: Any) -> None:
        if _flag(pred):
            self.state.barrier(bar, self.program).expect(int(nbytes))

    def create_mbarrier_arrive(self, bar: SharedView, count: int, *rest: Any) -> None:
        # (bar, count, pred) in Triton 3.6; (bar, count, cta_mask, pred) from 3.8 on
        if _flag(rest[-1] if rest else None):
            self.state.barrier(bar, self.program).arrive(int(count))

    def create_mbarrier_wait(self, bar: SharedView, phase: Any, pred: Any = None, *rest: Any) -> None:
        if not _flag(pred):
            return
        barrier = self.state.barrier(bar, self.program)
        parity = _int(phase)
        self.state.wait(lambda: barrier.completed(parity), f"mbarrier.wait(phase={parity})")

    def create_fence_async_shared(self, *args: Any) -> None:
        pass

    def create_fence_mbarrier_init_release_cluster(self, *args: Any) -> None:
        pass

    # -- cp.async (Ampere) -----------------------------------------------------------------------------------

    def create_async_copy_global_to_local(
        self, view: SharedView, ptrs: Any, mask: Any, other: Any, *rest: Any
    ) -> None:
        if not isinstance(mask, TensorHandle):
            mask = TensorHandle(np.ones(np.shape(ptrs.data), dtype=bool), compat.tl.int1)
        other = other if isinstance(other, TensorHandle) else None
        values = compat.interpreter_masked_load(self._base, ptrs, mask, other)
        self._store_shared(view, values.data)

    def create_async_commit_group(self, *args: Any) -> None:
        pass

    def create_async_wait_group(self, *args: Any) -> None:
        pass

    def create_async_copy_mbarrier_arrive(
        self, bar: SharedView, increment_count: bool = True, *rest: Any
    ) -> None:
        # cp.async.mbarrier.arrive: the pending count is incremented before the arrive unless .noinc, so only
        # the .noinc form (increment_count=False) counts as an arrival.
        if not increment_count:
            self.state.barrier(bar, self.program).arrive(1)

    # -- TMA -------------------------------------------------------------------------------------------------

    def create_make_tensor_descriptor(
        self, ty: Any, base: Any, shape: list[Any], strides: list[Any], padding: Any = None, *rest: Any
    ) -> SimDescriptor:
        block = _block_type_of(ty)
        return SimDescriptor(
            base=_int(base),
            element=base.get_element_ty(),
            shape=[_int(s) for s in shape],
            strides=[_int(s) for s in strides],
            block_shape=list(block.shape),
            padding=_padding_name(padding),
        )

    def create_async_tma_copy_global_to_local(
        self,
        desc: SimDescriptor,
        coord: list[Any],
        bar: SharedView,
        result: SharedView,
        pred: Any,
        *rest: Any,
    ) -> None:
        if not _flag(pred):
            return
        values = self._tma_read(desc, coord)
        self._store_shared(result, values)
        self.state.barrier(bar, self.program).complete_tx(desc.box_bytes)

    def create_async_tma_copy_local_to_global(
        self, desc: SimDescriptor, coord: list[Any], src: SharedView, *rest: Any
    ) -> None:
        ptrs, mask = desc.box([_int(c) for c in coord])
        value = TensorHandle(self._load_shared(src).reshape(desc.block_shape), desc.element)
        compat.interpreter_masked_store(self._base, ptrs, value, mask)

    def create_async_tma_reduce(
        self, kind: Any, desc: SimDescriptor, coord: list[Any], src: SharedView, *rest: Any
    ) -> None:
        ptrs, mask = desc.box([_int(c) for c in coord])
        value = TensorHandle(self._load_shared(src).reshape(desc.block_shape), desc.element)
        op = compat.tma_reduce_to_rmw(kind, desc.element)
        compat.interpreter_atomic_rmw(self._base, op, ptrs, value, mask)

    def create_async_tma_store_wait(self, *args: Any) -> None:
        pass

    def _tma_read(self, desc: SimDescriptor, coord: list[Any]) -> np.ndarray:
        ptrs, mask = desc.box([_int(c) for c in coord])
        other = None
        if desc.padding == "nan" and desc.element.is_floating():
            np_dtype = compat.np_dtype(desc.element)
            other = TensorHandle(
                np.full(desc.block_shape, np.nan, dtype=np.float32).astype(np_dtype), desc.element
            )
        return cast("np.ndarray", compat.interpreter_masked_load(self._base, ptrs, mask, other).data)

    # -- wgmma (Hopper) --------------------------------------------------------------------------------------

    def create_warpgroup_mma(
        self, a: Any, b: Any, acc: Any, use_acc: Any, precision: Any, max_num_imprecise_acc: Any, *rest: Any
    ) -> Any:
        return self._mma(
            self._operand(a), self._operand(b), acc, _flag(use_acc), precision, max_num_imprecise_acc
        )

    def create_warpgroup_mma_wait(self, deps: list[Any], num_outstanding: int = 0, *rest: Any) -> list[Any]:
        return list(deps)

    # -- tcgen05 and tensor memory (Blackwell) ---------------------------------------------------------------

    def _tensor_memory(self) -> SharedMemory:
        memory = self.state.tensor_memory.get(0)
        if memory is None or memory.program != self.program:
            memory = self.state.tensor_memory[0] = SharedMemory(self.program, space="tensor")
        return cast("SharedMemory", memory)

    def create_tmem_alloc(self, ty: Any, value: Any = None) -> SharedView:
        view = self._tensor_memory().allocate(ty.element, ty.shape)
        if isinstance(value, TensorHandle):
            np.copyto(
                view.array, np.broadcast_to(value.data, view.array.shape).astype(view.array.dtype, copy=False)
            )
        return view

    def create_tmem_load(self, ty: Any, view: SharedView, *rest: Any) -> Any:
        if rest:  # load_min / load_max: a reduction along the rows besides the values
            from tilelens.core.kernel.failures import UnsupportedConstruct

            raise UnsupportedConstruct("tensor memory load_min/load_max", " (TileLens Gluon simulator)")
        return TensorHandle(view.array.copy(), view.dtype)

    def create_tmem_store(self, view: SharedView, value: Any, pred: Any = None, *rest: Any) -> None:
        if _flag(pred):
            np.copyto(
                view.array, np.broadcast_to(value.data, view.array.shape).astype(view.array.dtype, copy=False)
            )

    def create_tmem_subslice(self, ty: Any, view: SharedView, start: int) -> SharedView:
        offsets = [0] * (view.array.ndim - 1) + [int(start)]
        return view.sub(offsets, list(ty.shape))

    def create_tmem_copy(self, src: SharedView, dst: SharedView) -> None:
        np.copyto(
            dst.array, self._load_shared(src).reshape(dst.array.shape).astype(dst.array.dtype, copy=False)
        )

    def create_tcgen05_mma(
        self, a: Any, b: Any, acc: SharedView, use_acc: Any, pred: Any, *rest: Any
    ) -> None:
        barriers = list(rest[0]) if rest else []
        preds = list(rest[1]) if len(rest) > 1 else [None] * len(barriers)
        if _flag(pred):
            d = TensorHandle(acc.array.copy(), acc.dtype)
            result = self._mma(self._operand(a), self._operand(b), d, _flag(use_acc), None, 0)
            np.copyto(acc.array, result.data.astype(acc.array.dtype, copy=False))
        for bar, bar_pred in zip(barriers, preds):
            if _flag(bar_pred):
                self.state.barrier(bar, self.program).arrive(1)

    def create_tcgen05_commit(self, bar: SharedView, pred: Any = None, *rest: Any) -> None:
        if _flag(pred):
            self.state.barrier(bar, self.program).arrive(1)

    # -- helpers ---------------------------------------------------------------------------------------------

    def _operand(self, value: Any) -> Any:
        """An MMA operand as a TensorHandle: registers as they are, shared memory read (and traced)."""
        if isinstance(value, SharedView):
            return TensorHandle(self._load_shared(value), value.dtype)
        return value

    def _mma(self, a: Any, b: Any, acc: Any, use_acc: bool, precision: Any, max_imprecise: Any) -> Any:
        d = acc if use_acc else TensorHandle(np.zeros_like(acc.data), acc.dtype)
        return self._base.create_dot(a, b, d, precision, max_imprecise)

    def _load_shared(self, view: SharedView) -> np.ndarray:
        self.state.trace(SHARED_LOAD, view, self.program)  # (tensor memory is not traced)
        return cast("np.ndarray", view.array.copy())

    def _store_shared(self, view: SharedView, values: np.ndarray) -> None:
        self.state.trace(SHARED_STORE, view, self.program)
        np.copyto(
            view.array, np.asarray(values).reshape(view.array.shape).astype(view.array.dtype, copy=False)
        )


def _block_type_of(ty: Any) -> Any:
    """The block type in the stub of ``get_tensor_descriptor_layout_type(block_ty, is_signed, layout)``."""
    for arg in getattr(ty, "args", ()):
        if hasattr(arg, "shape") and hasattr(arg, "element_ty"):
            return arg
    raise TypeError(f"cannot read the block type of tensor descriptor type {ty!r}")


def _padding_name(padding: Any) -> str:
    name = str(getattr(padding, "name", padding) or "zero").lower()
    return "nan" if "nan" in name else "zero"
