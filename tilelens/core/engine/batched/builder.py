"""The interpreter builder's methods for a batched run: what each does with the program axis.

``batched_methods`` takes the builder's methods as installed for the launch (Triton's, with TileLens's semantic
fixes and access hooks) and returns replacements. Each replacement calls the installed method unchanged when
no operand is batched (the value is the same for every program, so computing it once is what every program
would compute), except the methods whose result depends on the program itself (program ids, memory, prints),
which always take their batched path. With batched operands:

* element-wise methods run once on the batched data (numpy broadcasts the uniform operands); the result's
  shape is checked to be ``(B, *shape)``, else ``Fallback``;
* shape-aware methods shift their axes by one, or run per program where the per-program result is not
  provably what one numpy call over the batch gives (``create_dot``, ``create_histogram``);
* checks (``create_assume``) run once over the whole batch;
* memory methods hand the access hooks whole ``(B, *shape)`` blocks, contiguous (the C++ memory functions
  need that); the collector splits them per program (:meth:`AccessCollector.record`); block pointers
  (:mod:`.blockptr`, Triton 3.6 and 3.7) and tensor descriptors (:mod:`.descriptors`) at offsets that differ
  between programs materialise batched pointers for them;
* every other method ``Fallback``s: nothing unverified computes a batched answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tilelens.core import compat
from tilelens.core.engine.batched import blockptr, descriptors
from tilelens.core.engine.batched.state import (
    BatchedHandle,
    BatchState,
    Fallback,
    TensorHandle,
    has_batched,
    mark,
    plain,
)

# Methods computing each output lane from the same lane of their operands (shapes already equal per program).
ELEMENTWISE = frozenset(
    {
        "binary_op",
        "ternary_op",
        "unary_op",
        "cast_impl",
        "create_fp_to_fp",
        "create_bitcast",
        "create_si_to_fp",
        "create_ui_to_fp",
        "create_fp_to_si",
        "create_fp_to_ui",
        "create_fp_ext",
        "create_fp_trunc",
        "create_int_cast",
        "create_int_to_ptr",
        "create_ptr_to_int",
        "create_fadd",
        "create_fmul",
        "create_fdiv",
        "create_frem",
        "create_fsub",
        "create_fneg",
        "create_mul",
        "create_precise_divf",
        "create_approx_divf",  # Triton 3.9's tl.math.fdiv(approx=True)
        "create_sdiv",
        "create_udiv",
        "create_srem",
        "create_urem",
        "create_add",
        "create_sub",
        "create_shl",
        "create_lshr",
        "create_ashr",
        "create_minsi",
        "create_minui",
        "create_minimumf",
        "create_minnumf",
        "create_maxsi",
        "create_maxui",
        "create_maximumf",
        "create_maxnumf",
        "create_and",
        "create_xor",
        "create_or",
        "create_idiv",
        "create_umulhi",
        "create_clampf",
        "create_select",
        "create_fma",
        "create_fabs",
        "create_cos",
        "create_exp",
        "create_exp2",
        "create_iabs",
        "create_floor",
        "create_ceil",
        "create_log",
        "create_log2",
        "create_precise_sqrt",
        "create_sqrt",
        "create_sin",
        "create_erf",
        "create_rsqrt",
        "create_addptr",
        "create_extern_elementwise",
    }  # fmt: skip
)
# Methods that take their batched path even with uniform operands: their result depends on the program.
ALWAYS = frozenset(
    {
        "create_get_program_id",
        "create_masked_load",
        "create_masked_store",
        "create_load",
        "create_store",
        "create_atomic_rmw",
        "create_atomic_cas",
        *compat.ATOMIC_LOAD_STORE_METHODS,  # 3.9: they order memory between programs
        "create_print",
        "create_inline_asm",
        "create_descriptor_load",
        "create_descriptor_store",
        "create_descriptor_gather",
        "create_descriptor_scatter",
    }  # fmt: skip
)
_TYPES = frozenset({"set_grid_idx", "set_grid_dim", "get_ptr_ty", "get_block_ty"})
# Methods that only check a condition (``tl.assume``: ``assert condition``, true when every lane is): over the
# batch they pass exactly when every program's call passes; one that fails raises, and the launch runs per
# program, where the first failing program raises it as the stock interpreter does.
CHECKS = frozenset({"create_assume"})
# The most lanes one batched value may have (all programs together); a grid whose blocks need more runs per
# program, in the stock interpreter's memory (the batched run holds every program's block at once).
MAX_LANES = 1 << 24
# The most access lanes a batched attempt keeps for its trace and dependence check (about 20 bytes each).
MAX_HELD = 1 << 26


def _check_size(shape: tuple[int, ...]) -> None:
    if math.prod(shape) > MAX_LANES:
        raise Fallback("grid too large to batch")


def _np(h: Any) -> Any:
    return compat.np_dtype(h.dtype)


def _handle_ndim(h: Any) -> int:
    """``h``'s ndim with the program axis (a uniform handle gets one), or -1 for what is no handle."""
    t = type(h)
    if t is BatchedHandle:
        return _ndim(h.data)
    if t is TensorHandle or isinstance(h, TensorHandle):
        return _ndim(h.data) + 1
    return -1


def _ndim(data: Any) -> int:
    return data.ndim if type(data) is np.ndarray else int(np.ndim(data))


def _expected_ndim(args: tuple[Any, ...]) -> int:
    """The ndim a batched element-wise result must have: the widest operand's, with the program axis."""
    best = 0
    for a in args:
        t = type(a)
        if t is list or t is tuple:
            for h in a:
                best = max(best, _handle_ndim(h))
        else:
            nd = _handle_ndim(a)
            if nd > best:
                best = nd
    return best


_NAMES: dict[tuple[Any, ...], tuple[str, ...]] = {}


def builder_method_names(builder_cls: type) -> tuple[str, ...]:
    """The builder's own methods a batched attempt replaces (every callable but the dunders).

    Kept per (class, attribute names): the same class with the same attributes gives the same names, and
    filtering them costs more than a small launch's batched attempt."""
    key = (builder_cls, *vars(builder_cls))
    names = _NAMES.get(key)
    if names is None:
        if len(_NAMES) >= 16:
            _NAMES.clear()
        names = _NAMES[key] = tuple(
            name
            for name in vars(builder_cls)
            if not name.startswith("__") and callable(getattr(builder_cls, name))
        )
    return names


def _late(builder_cls: type, name: str) -> Callable[..., Any]:
    """``builder_cls.<name>`` as installed when it is called (not when the batched class was built)."""

    def original(self: Any, *args: Any, **kw: Any) -> Any:
        return getattr(builder_cls, name)(self, *args, **kw)

    return original


def batched_class(builder_cls: type, state: BatchState) -> type:
    """A subclass of ``builder_cls`` whose methods are ``batched_methods`` for ``state``: built once per state.

    The interpreter's one builder object takes this class for a batched attempt (one change to install and
    to put back, instead of one per method). Each method calls the parent's method as installed *at call
    time* (``_late``): the launch's access hooks and semantic fixes are new objects every launch, so the class
    stays valid for every later attempt with this state (``state_for`` hands out the same state for the same
    grid). The name is the parent's, so error messages naming the builder's class read as the stock ones.
    """
    names = builder_method_names(builder_cls)
    key = (builder_cls, names)
    built = state.built.get(key)
    if built is None:
        installed = {name: _late(builder_cls, name) for name in names}
        namespace: dict[str, Any] = dict(batched_methods(installed, state))
        namespace.update(__qualname__=builder_cls.__qualname__, __module__=builder_cls.__module__)
        built = state.built[key] = type(builder_cls.__name__, (builder_cls,), namespace)
    return built


def batched_methods(
    installed: dict[str, Callable[..., Any]], state: BatchState
) -> dict[str, Callable[..., Any]]:
    """Replacements for ``installed`` (name -> the builder's method now) for the batched attempt ``state``."""
    size = state.size
    out: dict[str, Callable[..., Any]] = {}

    def elementwise(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kw: Any) -> Any:
            for a in args:  # ``has_batched``, inline: this runs for every element-wise operation
                t = type(a)
                if t is BatchedHandle or (
                    (t is list or t is tuple) and any(type(x) is BatchedHandle for x in a)
                ):
                    break
            else:
                return original(self, *args, **kw)
            ret = original(self, *[plain(a) for a in args], **kw)
            data = ret.data
            if type(data) is not np.ndarray:
                data = np.asarray(data)
            if data.ndim != _expected_ndim(args) or data.shape[0] != size:
                raise Fallback(f"unexpected shape from {name}")
            return mark(ret)

        return method

    def shaped(name: str, original: Callable[..., Any], impl: Callable[..., Any]) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kw: Any) -> Any:
            if not has_batched(args):
                return original(self, *args, **kw)
            return impl(self, *args, **kw)

        return method

    def check(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def method(self: Any, *args: Any) -> Any:
            return original(self, *[plain(a) for a in args])

        return method

    def refuse(name: str, original: Callable[..., Any], always: bool = False) -> Callable[..., Any]:
        reason = {"create_print": "device_print"}.get(name, name)
        if name.startswith("create_atomic_"):
            reason = name.removeprefix("create_")  # atomic_cas, atomic_load, atomic_store, atomic_poll
        if "descriptor" in name:
            reason = "tensor descriptor"
        elif name == "create_inline_asm":
            reason = "inline_asm"

        def method(self: Any, *args: Any, **kw: Any) -> Any:
            if always or has_batched(args):
                raise Fallback(reason if always else f"unsupported with batched operands: {name}")
            return original(self, *args, **kw)

        return method

    shape_impls = _shape_impls(installed, state)
    memory = {
        **_memory_impls(installed, state),
        **blockptr.impls(installed, state),
        **descriptors.impls(installed, state),
    }
    for name, original in installed.items():
        if name in _TYPES or (name.startswith("get_") and name.endswith("_ty")):
            continue
        if name in memory:
            out[name] = memory[name]
        elif name in ALWAYS:
            out[name] = refuse(name, original, always=True)
        elif name in CHECKS:
            out[name] = check(name, original)
        elif name in ELEMENTWISE or name.startswith(("create_icmp", "create_fcmp")):
            out[name] = elementwise(name, original)
        elif name in shape_impls:
            out[name] = shaped(name, original, shape_impls[name])
        else:
            out[name] = refuse(name, original)
    return out


def _shape_impls(
    installed: dict[str, Callable[..., Any]], state: BatchState
) -> dict[str, Callable[..., Any]]:
    size = state.size

    def per_ndim(h: Any) -> int:
        return int(np.ndim(h.data)) - (1 if type(h) is BatchedHandle else 0)

    def splat(self: Any, ret_ty: Any, arg: Any) -> Any:
        shape = (size, *ret_ty.shape)
        _check_size(shape)
        first = np.asarray(arg.data).reshape(size, -1)[:, :1].reshape((size,) + (1,) * (len(shape) - 1))
        out = np.empty(shape, dtype=_np(arg))
        out[...] = first  # each program's first element, cast as ``astype`` casts (unsafe, same values)
        return BatchedHandle(out, arg.dtype.scalar)

    def unsplat(self: Any, arg: Any) -> Any:
        first = np.asarray(arg.data).reshape(size, -1)[:, :1]
        return BatchedHandle(first.astype(_np(arg)), arg.dtype.scalar)

    def broadcast(self: Any, arg: Any, shape: Any) -> Any:
        _check_size((size, *tuple(shape)))
        return BatchedHandle(np.broadcast_to(arg.data, (size, *tuple(shape))), arg.dtype.scalar)

    def expand_dims(self: Any, arg: Any, axis: int) -> Any:
        axis = int(axis)
        if axis < 0:
            axis += per_ndim(arg) + 1
        return BatchedHandle(np.expand_dims(arg.data, axis + 1), arg.dtype.scalar)

    def reshape(self: Any, arg: Any, shape: Any, allow_reorder: Any = False) -> Any:
        return BatchedHandle(np.asarray(arg.data).reshape((size, *tuple(shape))), arg.dtype.scalar)

    def trans(self: Any, arg: Any, perm: Any) -> Any:
        axes = [0, *(int(p) + 1 for p in perm)]
        return BatchedHandle(np.transpose(arg.data, axes), arg.dtype.scalar)

    def cat(self: Any, lhs: Any, rhs: Any) -> Any:
        data = np.concatenate([state.full(lhs), state.full(rhs)], axis=1)
        return BatchedHandle(data, lhs.dtype.scalar)

    def join(self: Any, lhs: Any, rhs: Any) -> Any:
        return BatchedHandle(np.stack([state.full(lhs), state.full(rhs)], axis=-1), lhs.dtype.scalar)

    def split(self: Any, val: Any) -> Any:
        data = val.data
        return BatchedHandle(data[..., 0], val.dtype.scalar), BatchedHandle(data[..., 1], val.dtype.scalar)

    def gather(self: Any, src: Any, indices: Any, axis: int) -> Any:
        axis = int(axis)
        if axis < 0:
            axis += per_ndim(src)
        data = np.take_along_axis(state.full(src), state.full(indices), axis=axis + 1)
        return BatchedHandle(data, src.dtype.scalar)

    def per_program(name: str) -> Callable[..., Any]:
        original = installed[name]

        def method(self: Any, *args: Any) -> Any:
            rets = [original(self, *[state.slice(a, b) for a in args]) for b in range(size)]
            return BatchedHandle(np.stack([np.asarray(r.data) for r in rets]), rets[0].dtype)

        return method

    impls: dict[str, Callable[..., Any]] = {
        "create_splat": splat,
        "create_unsplat": unsplat,
        "create_broadcast": broadcast,
        "create_expand_dims": expand_dims,
        "create_reshape": reshape,
        "create_trans": trans,
        "create_cat": cat,
        "create_join": join,
        "create_split": split,
        "create_gather": gather,
    }
    for name in ("create_dot", "create_histogram"):
        if name in installed:
            impls[name] = per_program(name)
    return {k: v for k, v in impls.items() if k in installed}


def _memory_impls(
    installed: dict[str, Callable[..., Any]], state: BatchState
) -> dict[str, Callable[..., Any]]:
    """Memory methods over whole ``(B, *shape)`` blocks, through the installed access hooks."""
    load, store = installed["create_masked_load"], installed["create_masked_store"]
    rmw = installed["create_atomic_rmw"]

    def block(h: Any, shape: tuple[int, ...]) -> Any:
        if type(h) is np.ndarray:  # the stock block-pointer load / store pass their masks as bare arrays
            h = TensorHandle(h, compat.tl.int1)
        data = np.asarray(h.data)
        if data.shape != shape or not (data.flags.c_contiguous and data.flags.writeable):
            # The C++ memory functions need contiguous, writeable arrays of the block's full shape.
            data = np.array(np.broadcast_to(data, shape), order="C")
        return TensorHandle(data, h.dtype)

    def shape_of(ptrs: Any) -> tuple[int, ...]:
        shape = tuple(state.full(ptrs).shape)
        _check_size(shape)
        state.held += int(np.prod(shape))
        if state.held > MAX_HELD:
            raise Fallback("launch too large to batch")
        return shape

    def masked_load(self: Any, ptrs: Any, mask: Any, other: Any, *rest: Any, **kw: Any) -> Any:
        shape = shape_of(ptrs)
        other = None if other is None else block(other, shape)
        return mark(load(self, block(ptrs, shape), block(mask, shape), other, *rest, **kw))

    def masked_store(self: Any, ptrs: Any, value: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
        shape = shape_of(ptrs)
        return store(self, block(ptrs, shape), block(value, shape), block(mask, shape), *rest, **kw)

    # create_load / create_store: the stock ones with an all-true mask, the cache hints after the operands
    # passed on as they came (two of them, or 3.9's one: compat.CACHE_POLICY_ARGUMENT).
    def plain_load(self: Any, ptr: Any, *rest: Any, **kw: Any) -> Any:
        per = np.shape(ptr.data)[1:] if type(ptr) is BatchedHandle else np.shape(ptr.data)
        mask = TensorHandle(np.ones(per, dtype=bool), compat.tl.int1)
        return self.create_masked_load(ptr, mask, None, *rest, **kw)

    def plain_store(self: Any, ptr: Any, val: Any, *rest: Any, **kw: Any) -> Any:
        per = np.shape(ptr.data)[1:] if type(ptr) is BatchedHandle else np.shape(ptr.data)
        mask = TensorHandle(np.ones(per, dtype=bool), compat.tl.int1)
        return self.create_masked_store(ptr, val, mask, *rest, **kw)

    def atomic_rmw(self: Any, op: Any, ptr: Any, val: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
        if str(getattr(op, "name", op)).upper().endswith("XCHG"):
            raise Fallback("atomic_xchg")
        shape = shape_of(ptr)
        return mark(rmw(self, op, block(ptr, shape), block(val, shape), block(mask, shape), *rest, **kw))

    def program_id(self: Any, axis: int) -> Any:
        return state.program_id(int(axis))

    return {
        "create_masked_load": masked_load,
        "create_masked_store": masked_store,
        "create_load": plain_load,
        "create_store": plain_store,
        "create_atomic_rmw": atomic_rmw,
        "create_get_program_id": program_id,
    }
