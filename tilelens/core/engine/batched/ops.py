"""Reductions, scans and Python control flow on batched values.

Reductions and scans are not builder methods: the interpreter computes them in ``ReduceOps``/``ScanOps``
on ``tl.tensor`` objects whose type carries the per-program shape. With a batched operand:

* reductions whose result does not depend on the order of combination (min, max, argmin, argmax, integer
  sums), and float sums of 1-D blocks (numpy sums each C-contiguous row of the batch pairwise, exactly as it
  sums one program's 1-D block, strided or not), run once over the batch, the axis shifted past the program
  axis;
* everything else (float sums over more dimensions, whose rounding follows numpy's traversal order, scans,
  custom combine functions) runs the interpreter's own code per program and stacks the results: the
  per-program answer by construction.

Python control flow asks a tensor for ``__bool__`` or ``__index__``: every program must agree, else
``Fallback("divergent control flow")``. Each decision is also where a program could wait for another one's
write (a spin loop): the dependence check runs there, at doubling intervals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tilelens.core import compat
from tilelens.core.engine.batched.state import BatchedHandle, BatchState, Fallback, TensorHandle

tl = compat.tl


class _LiftedType(tl.block_type):  # type: ignore[misc, name-defined]
    """A block type with the program axis in front: any size (Triton's own insists on powers of two)."""

    def __init__(self, element_ty: Any, shape: list[int]) -> None:
        self.element_ty = element_ty
        self.shape = tuple(int(n) for n in shape)
        self.numel = int(np.prod(self.shape))
        self.name = f"<{self.shape}, {self.element_ty}>"


_LIFTED: dict[type, type] = {}


def _lifted_op(op: Any, axis: int | None) -> Any:
    """``op`` over the lifted operands: same combine function, ``axis``, results typed with ``_LiftedType``."""
    cls = type(op)
    lifted = _LIFTED.get(cls)
    if lifted is None:

        def to_tensor(self: Any, ret: Any, dtype: Any) -> Any:
            np_dtype = compat.np_dtype(dtype)
            if hasattr(ret, "shape") and ret.shape:
                ret = ret.astype(np_dtype)
                return tl.core.tensor(TensorHandle(ret, dtype.scalar), _LiftedType(dtype, list(ret.shape)))
            return tl.core.tensor(TensorHandle(np.array([ret], dtype=np_dtype), dtype.scalar), dtype)

        lifted = _LIFTED[cls] = type(f"Lifted{cls.__name__}", (cls,), {"to_tensor": to_tensor})
    return lifted(axis, op.combine_fn, op.keep_dims)


def _order_free(op: Any, tensors: tuple[Any, ...]) -> bool:
    std = tl.standard
    fn = op.combine_fn
    names = (
        "_argmin_combine_tie_break_left", "_argmin_combine_tie_break_fast", "_argmax_combine_tie_break_left",
        "_argmax_combine_tie_break_fast", "_elementwise_max", "_elementwise_min",
    )  # fmt: skip
    if any(fn is getattr(std, n, None) for n in names):
        return True
    if fn is getattr(std, "_sum_combine", None):
        if all(t.dtype.is_int() or t.dtype.is_bool() for t in tensors):
            return True
        # Float sums of 1-D blocks: numpy sums each program's row pairwise, as it sums the 1-D block alone
        # (checked for strided and broadcast rows; the lifted data is made C-contiguous for it).
        return all(len(t.type.shape) == 1 for t in tensors)
    return False


def reduce_apply(original: Callable[..., Any], state: BatchState) -> Callable[..., Any]:
    """``ReduceOps.apply`` that understands batched operands (see the module docstring)."""

    def apply(self: Any, input: Any) -> Any:
        tensors = input if isinstance(input, tuple) else (input,)
        if not state.active or not any(type(getattr(t, "handle", None)) is BatchedHandle for t in tensors):
            return original(self, input)
        if not isinstance(input, tuple):
            return apply(self, (input,))[0]
        if not all(t.type.is_block() for t in tensors):
            raise Fallback("reduction of a scalar")
        if _order_free(self, tensors):
            return _reduce_batched(original, self, tensors, state)
        return _per_program(original, self, tensors, state)

    return apply


def scan_apply(original: Callable[..., Any], state: BatchState) -> Callable[..., Any]:
    """``ScanOps.apply``, per program for batched operands."""

    def apply(self: Any, input: Any) -> Any:
        tensors = input if isinstance(input, tuple) else (input,)
        if not state.active or not any(type(getattr(t, "handle", None)) is BatchedHandle for t in tensors):
            return original(self, input)
        if not isinstance(input, tuple):
            return apply(self, (input,))[0]
        return _per_program(original, self, tensors, state)

    return apply


def _per_program(original: Callable[..., Any], op: Any, tensors: tuple[Any, ...], state: BatchState) -> Any:
    results = []
    for b in range(state.size):
        inputs = tuple(tl.core.tensor(state.slice(t.handle, b), t.type) for t in tensors)
        results.append(original(op, inputs))
    out = []
    for j, first in enumerate(results[0]):
        data = np.stack([np.asarray(r[j].handle.data) for r in results])
        out.append(tl.core.tensor(BatchedHandle(data, first.handle.dtype), first.type))
    return tuple(out)


def _reduce_batched(
    original: Callable[..., Any], op: Any, tensors: tuple[Any, ...], state: BatchState
) -> Any:
    size = state.size
    shape = list(tensors[0].type.shape)
    axis = op.axis
    if axis is None:
        n = int(np.prod(shape))
        datas = [np.ascontiguousarray(state.full(t.handle)).reshape(size, n) for t in tensors]
        lifted_op = _lifted_op(op, 1)
        out_shape = [1] * len(shape) if op.keep_dims else []
    else:
        axis = int(axis) + (len(shape) if int(axis) < 0 else 0)
        datas = [np.ascontiguousarray(state.full(t.handle)) for t in tensors]
        lifted_op = _lifted_op(op, axis + 1)
        out_shape = shape[:axis] + ([1] if op.keep_dims else []) + shape[axis + 1 :]
    lifted = tuple(
        tl.core.tensor(TensorHandle(d, t.handle.dtype), _LiftedType(t.dtype, list(d.shape)))
        for d, t in zip(datas, tensors)
    )
    results = original(lifted_op, lifted)
    out = []
    for r in results:
        per = tuple(out_shape) if out_shape else (1,)
        data = np.asarray(r.handle.data).reshape((size, *per))
        ty = tl.block_type(r.dtype, out_shape) if out_shape else r.dtype  # per program: Triton's own
        out.append(tl.core.tensor(BatchedHandle(data, r.handle.dtype), ty))
    return tuple(out)


def _agreed(data: np.ndarray, size: int) -> np.ndarray | None:
    """Program 0's value when every program's equals it, else None."""
    rows = np.asarray(data).reshape(size, -1)
    first = rows[0]
    same = rows == first
    if np.issubdtype(rows.dtype, np.floating):  # NaN everywhere is one decision too
        same |= np.isnan(rows) & np.isnan(first)
    return first if same.all() else None


def tensor_methods(
    stock_bool: Callable[[Any], bool],
    stock_index: Callable[[Any], int],
    stock_t: property,
    state: BatchState,
    decide: Callable[[], None],
) -> dict[str, Any]:
    """``tl.tensor.__bool__``/``__index__``/``T`` for the batched attempt; the stock ones once it is over."""

    def __bool__(self: Any) -> bool:  # noqa: N807 (the dunder it replaces)
        if not state.active:
            return stock_bool(self)
        decide()
        handle = self.handle
        if type(handle) is not BatchedHandle:
            return stock_bool(self)
        first = _agreed(handle.data, state.size)
        if first is None:
            raise Fallback("divergent control flow")
        return stock_bool(
            tl.core.tensor(TensorHandle(first.reshape(np.shape(handle.data)[1:]), handle.dtype), self.type)
        )

    def __index__(self: Any) -> int:  # noqa: N807
        if not state.active:
            return stock_index(self)
        decide()
        handle = self.handle
        if type(handle) is not BatchedHandle:
            return stock_index(self)
        first = _agreed(handle.data, state.size)
        if first is None:
            raise Fallback("divergent control flow")
        return stock_index(
            tl.core.tensor(TensorHandle(first.reshape(np.shape(handle.data)[1:]), handle.dtype), self.type)
        )

    def transposed(self: Any) -> Any:
        handle = self.handle
        if not state.active or type(handle) is not BatchedHandle:
            getter = stock_t.fget
            assert getter is not None
            return getter(self)
        # The stock property reverses every axis of the data: here every axis but the program axis.
        data = np.asarray(handle.data)
        moved = np.transpose(data, [0, *range(data.ndim - 1, 0, -1)])
        shape = list(self.type.shape)
        shape[-1], shape[-2] = shape[-2], shape[-1]
        return tl.core.tensor(BatchedHandle(moved, handle.dtype), tl.core.block_type(self.dtype, shape))

    return {"__bool__": __bool__, "__index__": __index__, "T": property(transposed)}
