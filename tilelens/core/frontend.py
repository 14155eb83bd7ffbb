"""Cheaper equivalents of Triton interpreter internals that every interpreted operation runs through.

The stock interpreter spends most of a launch in Triton's language front end (type checks, casts,
broadcasts), once per operation and program. Two pieces of it do work whose result is known without doing
it; ``interpreter.launch_patches`` installs these replacements for the length of a launch:

* ``_get_np_dtype`` builds a dictionary of nineteen Triton types (hashing each) on every call, to answer a
  question that depends only on the type's class and name: the answer is memoised per (class, name), the
  first answer for each computed by Triton's own function (errors are not memoised; they recur).
* ``binary_op_sanitize_overflow_impl`` (``+``, ``-``, ``*`` of integers below 64 bits) recomputes the
  operation in int64, compares it with the type's range and hands the condition to ``device_assert``, which
  ignores it unless the builder's options say ``debug`` (the interpreter's never do: ``InterpreterOptions()``).
  With ``debug`` off and Triton's own ``device_assert`` in place, the computation has no effect: it is skipped.
  Its argument checks (the same scalar type on both sides, an integer type) still run, so a call that fails
  in Triton fails here too; with ``debug`` on, Triton's own function runs.

* ``InterpreterBuilder.get_block_ty`` and ``block_type.with_element_ty`` construct a new ``block_type`` (name
  string, shape validation) for every operation that splats or casts a block; block types are values (nothing
  sets their attributes after construction), so one instance per (element type, shape) serves every caller.
* ``index_through_squeeze``: Triton 3.6's tensor patching with 3.7's ``__index__`` (numpy >= 2.4).

Invariant: every replacement returns what Triton's function returns, or raises what it raises, for every
input; it is only cheaper.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilelens.core import compat

_MAX_CACHED = 4096
_TL_TUPLE = compat.tl_tuple


def cached_np_dtype(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``_get_np_dtype`` memoised by the Triton type's (class, name); misses ask ``original``."""
    cache: dict[tuple[type, str], Any] = {}

    def _get_np_dtype(tt_dtype: Any) -> Any:
        name = getattr(tt_dtype, "name", None)
        if type(name) is not str:
            return original(tt_dtype)
        key = (type(tt_dtype), name)
        found = cache.get(key)
        if found is None:
            found = original(tt_dtype)
            if len(cache) >= _MAX_CACHED:  # block types name their shapes: bound the distinct ones kept
                cache.clear()
            cache[key] = found
        return found

    return _get_np_dtype


def sanitize_overflow(
    original: Callable[..., Any], stock_device_assert: Callable[..., Any]
) -> Callable[..., Any]:
    """``binary_op_sanitize_overflow_impl`` that skips the overflow check ``device_assert`` would ignore."""

    def binary_op_sanitize_overflow_impl(self: Any, lhs: Any, rhs: Any, binary_op: Any) -> Any:
        options: Any = getattr(getattr(self, "builder", None), "options", None)
        if getattr(options, "debug", True) or type(self).device_assert is not stock_device_assert:
            # also where the builder has no options: Triton's own answer
            return original(self, lhs, rhs, binary_op)
        if lhs.type.scalar.int_bitwidth >= 64 or not options.sanitize_overflow:
            return None
        lhs_sca_ty = lhs.type.scalar
        rhs_sca_ty = rhs.type.scalar
        assert lhs_sca_ty == rhs_sca_ty, f"expected matching operand types, got {lhs_sca_ty} and {rhs_sca_ty}"
        assert lhs_sca_ty.is_int(), f"expected integer type, got {lhs_sca_ty}"
        return None

    return binary_op_sanitize_overflow_impl


def _shape_key(shape: Any) -> tuple[Any, ...] | None:
    """``shape``'s container type and ints (the key of a memo: Triton 3.8 refuses a builtin tuple where it takes
    a list or its own tuple), or None when it holds anything but ints."""
    kind = type(shape)
    dims = shape.values if kind is _TL_TUPLE else shape  # 3.8 keeps a block type's shape as a tl.tuple
    if kind is not _TL_TUPLE and kind is not list and kind is not tuple:
        return None
    for n in dims:
        if type(n) is not int:
            return None
    return (kind, *dims)


def cached_block_ty(original: Callable[..., Any]) -> Callable[..., Any]:
    """``InterpreterBuilder.get_block_ty`` returning one instance per (element type, shape)."""
    cache: dict[tuple[Any, ...], Any] = {}

    def get_block_ty(self: Any, dtype: Any, shape: Any) -> Any:
        dims = _shape_key(shape)
        name = getattr(dtype, "name", None)
        if dims is None or type(name) is not str:
            return original(self, dtype, shape)
        key = (type(dtype), name, dims)
        found = cache.get(key)
        if found is None:
            found = original(self, dtype, shape)
            if len(cache) >= _MAX_CACHED:
                cache.clear()
            cache[key] = found
        return found

    return get_block_ty


def cached_with_element_ty(original: Callable[..., Any]) -> Callable[..., Any]:
    """``block_type.with_element_ty`` returning one instance per (class, element type, shape)."""
    cache: dict[tuple[Any, ...], Any] = {}

    def with_element_ty(self: Any, scalar_ty: Any) -> Any:
        dims = _shape_key(getattr(self, "shape", None))
        name = getattr(scalar_ty, "name", None)
        if dims is None or type(name) is not str:
            return original(self, scalar_ty)
        key = (type(self), type(scalar_ty), name, dims)
        found = cache.get(key)
        if found is None:
            found = original(self, scalar_ty)
            if len(cache) >= _MAX_CACHED:
                cache.clear()
            cache[key] = found
        return found

    return with_element_ty


def index_through_squeeze(original: Callable[..., Any]) -> Callable[..., Any]:
    """Triton 3.6's tensor patching with 3.7's ``__index__``: numpy >= 2.4 refuses ``int()`` of a (1,) array.

    The interpreter's own scope sets (and at the end of the launch restores) ``tl.tensor.__index__``; ours is
    set through the same scope right after, so it is undone with it.
    """

    def _patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", scalar_index)

    return _patch_lang_tensor


def scalar_index(self: Any) -> int:
    return int(self.handle.data.squeeze())
