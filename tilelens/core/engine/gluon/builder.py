"""The simulator's stand-in for Gluon's IR builder: Gluon's own builtins run unchanged on top of it.

Gluon's builtins (``gl.arange``, ``smem.load``, ``tma.async_copy_global_to_shared``, ...) check their
arguments, compute result types and then call ``_semantic.builder.create_<op>(...)``. In the simulator that
builder is a ``GluonSimBuilder``: it forwards everything Triton's interpreter builder knows (arithmetic,
loads, stores, atomics: so global memory goes through the same hooks, and into the same access trace, as
Triton kernels), and adds Gluon's operations on numpy values. IR types become what the interpreter uses
(``get_distributed_ty`` gives a ``block_type``); layouts given to the IR become opaque stubs, since values do
not depend on them.

An operation it does not know is a construct the simulator does not support: calling it raises
``UnsupportedConstruct`` naming the Gluon builtin that asked for it (``gl.nvidia.blackwell.tcgen05_copy``),
and the launch is recorded as an error at the kernel line.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from tilelens.core import compat
from tilelens.core.engine.gluon.nvidia import NvidiaOps
from tilelens.core.engine.gluon.shared import SHARED_LOAD, SHARED_STORE, SharedView
from tilelens.core.engine.gluon.state import GluonLaunchState
from tilelens.core.kernel.failures import UnsupportedConstruct
from tilelens.core.kernel.layouts import auto

TensorHandle = compat.TensorHandle
_GLUON_LANGUAGE = "triton.experimental.gluon.language"


@dataclass(frozen=True)
class IRStub:
    """An IR type or layout attribute the simulator never needs to look into."""

    kind: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class MemDescType:
    """A shared- or tensor-memory descriptor type: what allocation, subview and reinterpret ops need."""

    element: Any
    shape: list[int]
    alloc_shape: list[int]


def gluon_caller() -> str | None:
    """The Gluon builtin on the stack, as kernel code names it (``gl.nvidia.hopper.tma.async_gather``)."""
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        code = frame.f_code
        if module.startswith(_GLUON_LANGUAGE) and not module.endswith("_semantic"):
            name = getattr(code, "co_qualname", code.co_name)
            if not name.startswith("_") and "<" not in name:
                parts = [p for p in module[len(_GLUON_LANGUAGE) :].split(".") if p and not p.startswith("_")]
                return ".".join(["gl", *parts, name])
        frame = frame.f_back  # type: ignore[assignment]
    return None


def unsupported(operation: str) -> Any:
    def raise_unsupported(*args: Any, **kwargs: Any) -> Any:
        raise UnsupportedConstruct(
            gluon_caller() or f"the Gluon operation {operation}", " (TileLens Gluon simulator)"
        )

    return raise_unsupported


class SimOptions:
    """The compile options Gluon's builtins read, answered for a simulated launch."""

    enable_iisan = False
    warp_size = 32
    maxnreg = None

    def __init__(self, base: Any, state: GluonLaunchState) -> None:
        self._base = base
        self._state = state

    @property
    def num_warps(self) -> int:
        return self._state.current_num_warps()

    @property
    def num_ctas(self) -> int:
        return self._state.num_ctas

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._base, name)


class GluonSimBuilder(NvidiaOps):
    def __init__(self, base: Any, state: GluonLaunchState) -> None:
        self._base = base  # Triton's (one, global) interpreter builder: grid index and every tl operation
        self.state = state
        self.options = SimOptions(base.options, state)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return getattr(self._base, name)
        except AttributeError:
            pass
        if name.startswith("get_") and name.endswith(("_layout", "_ty", "_type", "_attr")):
            return lambda *args: IRStub(name, args)
        return unsupported(name)

    @property
    def program(self) -> tuple[int, int, int]:
        return tuple(self._base.grid_idx)

    # -- types and layouts --------------------------------------------------------------------------------

    def get_distributed_ty(self, element: Any, shape: Any, layout: Any) -> Any:
        return compat.tl.block_type(element, list(shape))

    def get_shared_mem_desc_ty(self, element: Any, shape: Any, layout: Any, alloc_shape: Any) -> MemDescType:
        return MemDescType(element, list(shape), list(alloc_shape))

    def get_tensor_mem_desc_ty(self, element: Any, shape: Any, layout: Any, alloc_shape: Any) -> MemDescType:
        return MemDescType(element, list(shape), list(alloc_shape))

    def get_gluon_layout_from_tensor(self, handle: Any) -> Any:
        return auto()

    def get_gluon_layout_from_memdesc(self, view: SharedView) -> Any:
        return view.layout

    # -- distributed tensors --------------------------------------------------------------------------------

    def create_convert_layout(self, ty: Any, value: Any) -> Any:
        return value  # a layout moves values between threads; it never changes them

    def create_set_auto_layout(self, layout: Any, value: Any) -> Any:
        return value

    def is_convert_layout_trivial(self, ty: Any, value: Any) -> bool:
        return True

    def create_broadcast(self, arg: Any, shape: Any) -> Any:
        return self._base.create_broadcast(arg, list(getattr(shape, "shape", shape)))

    def create_histogram(self, data: Any, bins: int, mask: Any, *rest: Any) -> Any:
        return self._base.create_histogram(data, bins, mask if isinstance(mask, TensorHandle) else None)

    def create_cat(self, lhs: Any, rhs: Any, *rest: Any) -> Any:
        return self._base.create_cat(lhs, rhs)

    # -- shared memory --------------------------------------------------------------------------------------

    def create_local_alloc(self, ty: MemDescType, value: Any = None) -> SharedView:
        view = self.state.shared(self.program).allocate(ty.element, ty.shape)
        if isinstance(value, TensorHandle):
            self.create_local_store(view, value)
        return cast("SharedView", view)

    def create_local_dealloc(self, view: Any) -> None:
        pass

    def create_local_load(self, ty: Any, view: SharedView) -> Any:
        self.state.trace(SHARED_LOAD, view, self.program)
        return TensorHandle(view.array.copy(), view.dtype)

    def create_local_store(self, view: SharedView, value: Any) -> None:
        data = np.broadcast_to(value.data, view.array.shape)
        self.state.trace(SHARED_STORE, view, self.program)
        np.copyto(view.array, data.astype(view.array.dtype, copy=False))

    def create_local_gather(self, ty: Any, view: SharedView, indices: Any, axis: int) -> Any:
        index = indices.data.astype(np.int64)
        _check_indices(index, view.array.shape[axis], "gather")
        self._trace_lanes(SHARED_LOAD, view, index, axis)
        return TensorHandle(np.take_along_axis(view.array, index, axis=axis).copy(), view.dtype)

    def create_local_scatter(self, view: SharedView, values: Any, indices: Any, axis: int) -> None:
        index = indices.data.astype(np.int64)
        _check_indices(index, view.array.shape[axis], "scatter")
        self._trace_lanes(SHARED_STORE, view, index, axis)
        data = np.broadcast_to(values.data, index.shape).astype(view.array.dtype, copy=False)
        np.put_along_axis(view.array, index, data, axis=axis)

    def _trace_lanes(self, op: str, view: SharedView, index: np.ndarray, axis: int) -> None:
        if self.state.record_shared is not None and index.size:
            addresses = np.take_along_axis(view.addresses(), index, axis=axis)
            self.state.record_shared(op, addresses, view.array.itemsize, self.program)

    def create_memdesc_subslice(self, ty: MemDescType, view: SharedView, offsets: Any) -> SharedView:
        return view.sub([int(o) for o in offsets], ty.shape)

    def create_memdesc_index(self, ty: Any, view: SharedView, index: Any) -> SharedView:
        return view.index(int(np.asarray(index.data).item()))

    def create_memdesc_trans(self, view: SharedView, order: Any) -> SharedView:
        return view.permute([int(o) for o in order])

    def create_memdesc_reshape(self, view: SharedView, shape: Any) -> SharedView:
        return view.reshape([int(s) for s in shape])

    def create_memdesc_reinterpret(self, ty: MemDescType, view: SharedView) -> SharedView:
        return view.reinterpret(ty.element, ty.shape)


def _check_indices(index: np.ndarray, extent: int, what: str) -> None:
    if index.size and (index.min() < 0 or index.max() >= extent):
        raise IndexError(f"shared memory {what} index outside [0, {extent})")
