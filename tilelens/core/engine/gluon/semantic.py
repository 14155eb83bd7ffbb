"""Gluon's own semantic (its checks, its types) on the simulator's builder, for one simulated launch.

``GluonSimSemantic`` is Gluon's ``GluonSemantic`` with a ``GluonSimBuilder`` underneath: every Gluon builtin
and every ``tl`` operation on Gluon tensors runs Gluon's real argument and layout checks, so a kernel that
Gluon would reject at compile time is rejected here with Gluon's message. What needs the compiler is replaced:

* layout inference (``_wrap_handle_infer_layout``) follows ``layouts.py`` instead of asking the IR;
* values without a layout (reductions computed by the interpreter, ``.T``) become ``AutoLayout`` tensors
  before Gluon's checks see them;
* ``warp_specialize`` runs its partitions with ``partitions.Scheduler``; ``num_warps()`` answers for the
  partition that asks.
"""

from __future__ import annotations

from typing import Any

from tilelens.core import compat
from tilelens.core.engine.gluon.partitions import Scheduler
from tilelens.core.kernel import layouts
from tilelens.core.kernel.failures import UnsupportedConstruct

_gl = compat.gluon_language()
_ttgl_core = compat.gluon_core()


def distributed(value: Any, layout: Any = None) -> Any:
    """``value`` with a Gluon distributed type (``layout``, else its own, else ``AutoLayout``)."""
    ty = getattr(value, "type", None)
    if ty is None or not ty.is_block():
        return value
    if layout is None:
        if isinstance(ty, _ttgl_core.distributed_type):
            return value
        layout = layouts.auto()
    return _ttgl_core.tensor(value.handle, _ttgl_core.distributed_type(ty.scalar, list(ty.shape), layout))


def layout_of(value: Any) -> Any:
    return getattr(getattr(value, "type", None), "layout", None)


class GluonSimSemantic(compat.gluon_semantic_class()):  # type: ignore[misc]
    def __init__(self, builder: Any) -> None:
        super().__init__(builder)

    # -- layouts the compiler would infer --------------------------------------------------------------------

    def _wrap_handle_infer_layout(self, handle: Any, scalar_ty: Any, shape: Any) -> Any:
        if list(shape) == []:
            return self.tensor(handle, scalar_ty)
        return self.tensor(handle, _ttgl_core.distributed_type(scalar_ty, list(shape), layouts.auto()))

    def broadcast_impl_value(self, lhs: Any, rhs: Any) -> Any:
        return super().broadcast_impl_value(distributed(lhs), distributed(rhs))

    def broadcast_impl_shape(self, input: Any, shape: Any) -> Any:
        return super().broadcast_impl_shape(distributed(input), shape)

    def expand_dims(self, input: Any, axis: int) -> Any:
        input = distributed(input)
        result = super().expand_dims(input, axis)  # Gluon's checks: a slice along ``axis``, or auto
        if axis < 0:
            axis += len(input.shape) + 1
        return distributed(result, layouts.expanded(layout_of(input), axis))

    def permute(self, input: Any, dims: Any) -> Any:
        input = distributed(input)
        result = super().permute(input, dims)
        return distributed(result, layouts.permuted(layout_of(input), [int(d) for d in dims]))

    def memdesc_trans(self, mem_desc: Any, order: Any) -> Any:
        order = [int(compat.tl.core._unwrap_if_constexpr(o)) for o in order]
        if sorted(order) != list(range(mem_desc.rank)):
            raise ValueError(f"source rank ({mem_desc.rank}) and order {order} must match")
        alloc_shape = list(mem_desc.type.alloc_shape)
        lead = len(alloc_shape) - mem_desc.rank
        view = self.builder.create_memdesc_trans(mem_desc.handle, order)
        return _ttgl_core.shared_memory_descriptor(
            view,
            element_ty=mem_desc.dtype,
            shape=[mem_desc.shape[i] for i in order],
            layout=layouts.shared_permuted(mem_desc.layout, order),
            alloc_shape=alloc_shape[:lead] + [alloc_shape[lead:][i] for i in order],
        )

    def memdesc_reshape(self, mem_desc: Any, shape: Any) -> Any:
        shape = [int(compat.tl.core._unwrap_if_constexpr(s)) for s in shape]
        view = self.builder.create_memdesc_reshape(mem_desc.handle, shape)
        alloc_shape = list(mem_desc.type.alloc_shape)
        return _ttgl_core.shared_memory_descriptor(
            view,
            element_ty=mem_desc.dtype,
            shape=shape,
            layout=mem_desc.layout,
            alloc_shape=alloc_shape[: len(alloc_shape) - mem_desc.rank] + shape,
        )

    # -- what needs the compiler -----------------------------------------------------------------------------

    def warp_specialize(
        self,
        functions_and_args: Any,
        worker_num_warps: Any,
        worker_num_regs: Any = None,
        generator: Any = None,
    ) -> Any:
        state = self.builder.state
        if state.scheduler is not None:
            raise UnsupportedConstruct("gl.warp_specialize inside a warp-specialized partition")
        pairs = list(functions_and_args)
        if len(pairs) != len(worker_num_warps) + 1:
            raise ValueError(
                f"warp specialize got {len(pairs) - 1} partitions but {len(worker_num_warps)} warp counts"
            )
        warps = [state.num_warps, *[int(compat.tl.core._unwrap_if_constexpr(w)) for w in worker_num_warps]]
        bodies = [(_partition_body(fn, args), n) for (fn, args), n in zip(pairs, warps)]
        state.scheduler = Scheduler(state.thread_init)
        try:
            return state.scheduler.run(bodies)
        finally:
            state.scheduler = None

    def num_warps(self, generator: Any = None) -> Any:
        return compat.tl.constexpr(self.builder.state.current_num_warps())

    def num_ctas(self) -> Any:
        return compat.tl.constexpr(self.builder.state.num_ctas)

    def to_linear_layout(self, layout: Any, shape: Any) -> Any:
        if isinstance(layout, (_gl.AutoLayout, _gl.DistributedLinearLayout, _gl.SharedLinearLayout)):
            return compat.tl.constexpr(layout)
        raise UnsupportedConstruct("gl.to_linear_layout", " (TileLens Gluon simulator)")

    def bank_conflicts(self, distr_ty: Any, shared_ty: Any) -> Any:
        raise UnsupportedConstruct("gl.bank_conflicts", " (TileLens Gluon simulator)")

    def reduction(self, inputs: Any, axis: Any, region_builder_fn: Any) -> Any:
        raise UnsupportedConstruct("a reduction without a combine function", " (TileLens Gluon simulator)")

    def associative_scan(self, inputs: Any, axis: Any, region_builder_fn: Any, reverse: Any) -> Any:
        raise UnsupportedConstruct("a scan without a combine function", " (TileLens Gluon simulator)")


def _partition_body(fn: Any, args: Any) -> Any:
    def body() -> Any:
        return fn(*tuple(args))

    return body
