"""Cheaper equivalents of the type checks Triton's front end runs for every binary operator.

``TritonSemantic.binary_op_type_checking_impl`` (behind ``+ - * / % < & ...``) and ``broadcast_impl_value``
decide, for every operation and program, what the operand *types* already decide: which pointer mixes are
allowed, the computation type, whether a side must be cast, splatted or broadcast. ``interpreter._semantic_patches``
installs these replacements for the length of a launch; they remember each decision per pair of type objects
(block types are shared instances, ``frontend.cached_block_ty``) and then do only the value work Triton's
function does — the same builder calls, in the same order, with the same arguments.

* Two ``tl.tensor`` operands: Triton's answer depends on their types and the flags only (it never looks at the
  handles). The pointer checks and the computation type are computed once by Triton's own
  ``check_ptr_type_impl`` / ``computation_type_impl`` per (left type, right type, flags); an error there is not
  remembered (it recurs: the call goes to Triton's function, which raises it).
* A ``tl.tensor`` and a Python ``int``/``float`` (exact types, so ``bool`` and numpy scalars go to Triton):
  the scalar's type comes from Triton's ``to_tensor`` choice (``compat.number_type``, asked every time), the
  computation type is remembered per (tensor type, scalar type, side, ``div_or_mod``); the negative-unsigned
  and range checks run on every call and hand a failing call to Triton's function. The tensor Triton builds
  from the scalar first and then discards (``to_tensor``) is not built where ``to_tensor_type`` tells its
  type (3.7 on); building it has no effect.
  Pointer tensors and ``arithmetic_check=False`` (where that first tensor is kept) go to Triton.
* ``broadcast_impl_value`` (its answer depends on the operands' types only) returns the operands unchanged
  where Triton's function, asked once for that pair of type objects, did; a block and a scalar get Triton's splat, with the splat type and its IR type
  remembered per (types, builder); every other pair goes to Triton.

Only an exact ``TritonSemantic`` takes these paths (the Gluon simulator's subclass keeps Triton's). Invariant:
every replacement returns what Triton's function returns (the same objects where it returns its operands) or
raises what it raises, for every input; it is only cheaper.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilelens.core import compat

_MAX_CACHED = 4096
_SEMANTIC = compat.TritonSemantic
_TENSOR = compat.tl.core.tensor


def _store(cache: dict[Any, Any], key: Any, entry: Any) -> Any:
    if len(cache) >= _MAX_CACHED:
        cache.clear()
    cache[key] = entry
    return entry


def _bools(a: Any, b: Any, c: Any, d: Any) -> bool:
    """Whether the flags are bools, so they can key a memo (Triton's callers pass bools; anything else goes
    to Triton's function)."""
    return type(a) is bool and type(b) is bool and type(c) is bool and type(d) is bool


def type_checking(original: Callable[..., Any]) -> Callable[..., Any]:
    """``binary_op_type_checking_impl`` with its per-type decisions remembered."""
    # (id(left type), id(right type), flags...) -> (left type, right type, computation type or None)
    pairs: dict[tuple[Any, ...], tuple[Any, Any, Any]] = {}
    # (id(tensor type), id(scalar type), scalar on the left, div_or_mod) -> (tensor type, scalar type, ret, limits)
    scalars: dict[tuple[Any, ...], tuple[Any, Any, Any, Any]] = {}

    def tensors(self: Any, lhs: Any, rhs: Any, key: tuple[Any, ...], flags: tuple[bool, ...]) -> Any:
        lty, rty = lhs.type, rhs.type
        entry = pairs.get(key)
        if entry is None or entry[0] is not lty or entry[1] is not rty:
            allow_lhs_ptr, allow_rhs_ptr, arithmetic_check, div_or_mod = flags
            ls, rs = lty.scalar, rty.scalar
            self.check_ptr_type_impl(ls, rs, allow_lhs_ptr)  # raises as Triton's function would
            self.check_ptr_type_impl(rs, ls, allow_rhs_ptr)
            ret = None
            if arithmetic_check and not ls.is_ptr() and not rs.is_ptr():
                ret = self.computation_type_impl(ls, False, rs, False, div_or_mod)
            entry = _store(pairs, key, (lty, rty, ret))
        ret = entry[2]
        if ret is not None:
            # ``cast`` returns its operand unchanged for an equal scalar type; ``is`` implies equal
            if ret is not lty.scalar:
                lhs = self.cast(lhs, ret)
            if ret is not rty.scalar:
                rhs = self.cast(rhs, ret)
        return self.broadcast_impl_value(lhs, rhs)

    def with_scalar(self: Any, t: Any, x: Any, left: bool, div_or_mod: bool) -> Any:
        """The checked pair for tensor ``t`` and number ``x`` (``left``: ``x`` is the left operand), or None
        where Triton's function must answer (pointer tensors, failing checks)."""
        tty = t.type
        xty = compat.number_type(self, x)
        key = (id(tty), id(xty), left, div_or_mod)
        entry = scalars.get(key)
        if entry is None or entry[0] is not tty or entry[1] is not xty:
            tsca = tty.scalar
            if tsca.is_ptr():
                return None
            if left:
                ret = self.computation_type_impl(xty, True, tsca, False, div_or_mod)
            else:
                ret = self.computation_type_impl(tsca, False, xty, True, div_or_mod)
            limits = (ret.get_int_min_value(), ret.get_int_max_value()) if ret.is_int() else None
            entry = _store(scalars, key, (tty, xty, ret, (ret.is_int_unsigned(), limits)))
        ret = entry[2]
        unsigned, limits = entry[3]
        if unsigned and x < 0:
            return None
        if limits is not None and not (limits[0] <= x <= limits[1]):
            return None
        if left:
            lhs = self.scalar_constant(x, dtype=ret)
            rhs = t if ret is tty.scalar else self.cast(t, ret)
        else:
            lhs = t if ret is tty.scalar else self.cast(t, ret)
            rhs = self.scalar_constant(x, dtype=ret)
        return self.broadcast_impl_value(lhs, rhs)

    def binary_op_type_checking_impl(
        self: Any,
        lhs: Any,
        rhs: Any,
        allow_lhs_ptr: bool = False,
        allow_rhs_ptr: bool = False,
        arithmetic_check: bool = True,
        div_or_mod: bool = False,
    ) -> Any:
        if type(self) is _SEMANTIC:
            kl, kr = type(lhs), type(rhs)
            if kl is _TENSOR:
                if kr is _TENSOR and _bools(allow_lhs_ptr, allow_rhs_ptr, arithmetic_check, div_or_mod):
                    flags = (allow_lhs_ptr, allow_rhs_ptr, arithmetic_check, div_or_mod)
                    key = (id(lhs.type), id(rhs.type), *flags)
                    return tensors(self, lhs, rhs, key, flags)
                if (kr is int or kr is float) and arithmetic_check and type(div_or_mod) is bool:
                    done = with_scalar(self, lhs, rhs, False, div_or_mod)
                    if done is not None:
                        return done
            elif (
                kr is _TENSOR and (kl is int or kl is float) and arithmetic_check and type(div_or_mod) is bool
            ):
                done = with_scalar(self, rhs, lhs, True, div_or_mod)
                if done is not None:
                    return done
        return original(self, lhs, rhs, allow_lhs_ptr, allow_rhs_ptr, arithmetic_check, div_or_mod)

    return binary_op_type_checking_impl


_SAME, _SPLAT_LEFT, _SPLAT_RIGHT, _TRITON = range(4)


def broadcasting(original: Callable[..., Any]) -> Callable[..., Any]:
    """``broadcast_impl_value`` with the decision per pair of type objects (and builder) remembered."""
    # (id(left type), id(right type), id(builder)) -> (left type, right type, builder, kind, splat type, IR type)
    known: dict[tuple[int, int, int], tuple[Any, ...]] = {}

    def learn(self: Any, lhs: Any, rhs: Any, key: tuple[int, int, int]) -> Any:
        lty, rty, builder = lhs.type, rhs.type, self.builder
        lb, rb = lty.is_block(), rty.is_block()
        splat_ty = ir_ty = None
        if lb and not rb:
            kind, splat_ty = _SPLAT_RIGHT, lty.with_element_ty(rty.scalar)
        elif rb and not lb:
            kind, splat_ty = _SPLAT_LEFT, rty.with_element_ty(lty.scalar)
        else:
            kind = _TRITON
        if splat_ty is not None:
            ir_ty = splat_ty.to_ir(builder)
        out = original(self, lhs, rhs)
        if kind == _TRITON and out[0] is lhs and out[1] is rhs:
            kind = _SAME  # Triton keeps operands of these two types as they are (its answer depends on types only)
        _store(known, key, (lty, rty, builder, kind, splat_ty, ir_ty))
        return out

    def broadcast_impl_value(self: Any, lhs: Any, rhs: Any) -> Any:
        if type(self) is not _SEMANTIC:
            return original(self, lhs, rhs)
        lty, rty = lhs.type, rhs.type
        key = (id(lty), id(rty), id(self.builder))
        entry = known.get(key)
        if entry is None or entry[0] is not lty or entry[1] is not rty or entry[2] is not self.builder:
            return learn(self, lhs, rhs, key)
        kind = entry[3]
        if kind == _SAME:
            return lhs, rhs
        if kind == _SPLAT_RIGHT:
            return lhs, self.tensor(self.builder.create_splat(entry[5], rhs.handle), entry[4])
        if kind == _SPLAT_LEFT:
            return self.tensor(self.builder.create_splat(entry[5], lhs.handle), entry[4]), rhs
        return original(self, lhs, rhs)

    return broadcast_impl_value


FAST_TYPE_CHECKING = type_checking(_SEMANTIC.binary_op_type_checking_impl)
FAST_BROADCAST = broadcasting(_SEMANTIC.broadcast_impl_value)
