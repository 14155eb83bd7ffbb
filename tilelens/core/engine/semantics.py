"""Compiled-Triton semantics that Triton's stock CPU interpreter gets wrong or lacks.

Real kernels that compile and run on a GPU stop in the stock interpreter, or worse, run and compute something
else. Every replacement here is a plain function or value; ``interpreter.launch_patches`` installs them for
the length of one launch (recording or replay) through its ``_Patcher`` and removes them afterwards, so
nothing here changes Triton outside a TileLens launch. Each fix only acts on the values it is about (float
and wide integer scalar parameters, bfloat16 data, libdevice calls): kernels the stock interpreter already
ran correctly compute bit for bit what they computed before.

* **Scalar parameters.** Compiled Triton types a Python ``float`` argument as an ``fp32`` scalar, an int in
  [2**31, 2**63) as ``i64`` and a bool as ``i1``; the stock interpreter passes the float through as a Python
  float (so ``eps.to(tl.float32)`` fails), stores ints in [2**31, 2**32) as ``uint32``, and (3.6) a bool as
  int32 data under an ``i1`` type, which fails.
* **bfloat16.** The interpreter keeps bf16 values as their raw 16 bits in ``uint16`` arrays, and then does
  integer arithmetic, integer reductions and ``tl.dot`` on those bits, truncates fp32 -> bf16 instead of
  rounding to nearest even, has no ``get_bf16`` to make a bf16 constant (3.9's truncates), and its C atomics
  reject them.
  Here bf16 data is widened to fp32 for every numeric operation and rounded back to nearest even, which is
  what the GPU's bf16 instructions compute.
* **libdevice.** ``triton.language.extra.libdevice`` holds stubs that compiled Triton maps to the backend's
  library (``module_map``); called in the interpreter they return ``None``. The backend's functions call
  ``extern_elementwise``, which the interpreter does not implement. Here the stubs resolve to the CUDA
  backend's functions, as on an NVIDIA GPU, and each libdevice symbol runs as its numpy equivalent.
* **Failures** that remain (``tl.inline_asm_elementwise``, libdevice symbols without an equivalent) are
  described by ``describe_failure``: the construct and the kernel source line, for the launch record.
"""

from __future__ import annotations

import ctypes
import inspect
import math
import types
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np

from tilelens.core import compat
from tilelens.core.kernel.failures import UnsupportedConstruct

tl = compat.tl
TensorHandle = compat.TensorHandle

# ---------------------------------------------------------------------------------------------------------
# Scalar parameters


def typed_scalar_cvt(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The interpreter's argument conversion, with scalars typed as compiled Triton's signature types them.

    Everything that is not a float or a wide int goes to the interpreter's own conversion unchanged (tuples
    come back here element by element, because the interpreter recurses through the module global).
    """

    def _implicit_cvt(arg: Any) -> Any:
        if isinstance(arg, bool):  # i1 (Triton 3.6 stores it as int32 under an i1 type, which then fails)
            return tl.tensor(TensorHandle(np.array([arg], dtype=np.bool_), tl.int1), tl.int1)
        if isinstance(arg, float):
            with np.errstate(over="ignore"):  # compiled Triton passes a C float: out of range becomes inf
                data = np.array([arg], dtype=np.float32)
            return tl.tensor(TensorHandle(data, tl.float32), tl.float32)
        if isinstance(arg, int) and not isinstance(arg, bool) and 2**31 <= arg < 2**63:
            return tl.tensor(TensorHandle(np.array([arg], dtype=np.int64), tl.int64), tl.int64)
        return original(arg)

    return _implicit_cvt


# ---------------------------------------------------------------------------------------------------------
# bfloat16 numerics

# The canonical NaN NVIDIA's cvt.rn.bf16.f32 produces (NaN payloads are not kept by conversions).
_BF16_NAN = np.uint16(0x7FFF)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Exact: a bf16 value is the upper half of the fp32 with the same bits."""
    return cast("np.ndarray", (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32))


def _f32_bits_to_bf16(bits: np.ndarray) -> np.ndarray:
    bits = np.asarray(bits, dtype=np.uint32)
    # Round to nearest, ties to even: add 0x7FFF plus the lowest kept bit, then drop the low half. Only NaNs
    # can carry past 32 bits, and they are replaced below.
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    result: np.ndarray = np.where(nan, _BF16_NAN, rounded.astype(np.uint16)).astype(np.uint16)
    return result


def to_bf16(values: Any) -> np.ndarray:
    """Round any real numbers to bf16 bits (nearest, ties to even) with a single rounding.

    fp64 (and integer) inputs go through fp32 with round-to-odd, so the two-step rounding equals rounding
    the exact value once, as the GPU's direct conversion does.
    """
    values = np.asarray(values)
    if values.dtype == np.float32:
        return _f32_bits_to_bf16(values.view(np.uint32))
    if values.dtype in (np.float16, np.bool_) or (values.dtype.kind in "iu" and values.dtype.itemsize <= 2):
        return _f32_bits_to_bf16(values.astype(np.float32).view(np.uint32))
    wide = values.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = wide.astype(np.float32)
        back = narrow.astype(np.float64)
    bits = narrow.view(np.uint32).copy()
    inexact = (back != wide) & np.isfinite(back) & np.isfinite(wide)
    bits[inexact & (np.abs(back) > np.abs(wide))] -= np.uint32(1)  # truncate toward zero...
    bits[inexact] |= np.uint32(1)  # ...and make the last bit sticky (round to odd)
    return _f32_bits_to_bf16(bits)


def _is_bf16(value: Any) -> bool:
    # By name: cheaper than tl.dtype.__eq__, and this runs for every operand of every builder call.
    return type(value) is TensorHandle and getattr(value.dtype, "name", None) == "bf16"


def _widen(value: Any) -> Any:
    if _is_bf16(value):
        return TensorHandle(bf16_to_f32(value.data), tl.float32)
    return value


def _narrow(handle: Any) -> Any:
    # Comparisons give booleans; everything else computed from widened bf16 is rounded back.
    if isinstance(handle, TensorHandle) and handle.data.dtype == np.float32:
        return TensorHandle(to_bf16(handle.data), tl.bfloat16)
    return handle


def through_fp32(method: Callable[..., Any], result_from: int | None = None) -> Callable[..., Any]:
    """A builder method that computes bf16 operands in fp32 and rounds a bf16 result back.

    The result is bf16 when any operand was (element-wise ops keep their operands' type), or, with
    ``result_from``, when that operand was (``create_dot``'s accumulator decides its result type).
    """

    def wrapper(self: Any, *args: Any) -> Any:
        for a in args:
            if type(a) is TensorHandle and getattr(a.dtype, "name", None) == "bf16":
                break
        else:
            return method(self, *args)
        result = method(self, *[_widen(a) for a in args])
        narrow = _is_bf16(args[result_from]) if result_from is not None else True
        return _narrow(result) if narrow else result

    wrapper.__name__ = getattr(method, "__name__", "builder_method")
    return wrapper


def get_bf16(self: Any, value: float) -> Any:
    """A bf16 constant, rounded once from the Python float like compiled Triton's ``get_bf16``."""
    return TensorHandle(to_bf16(np.array([value], dtype=np.float64)), tl.bfloat16)


def bf16_cast(original: Callable[..., Any]) -> Callable[..., Any]:
    """``cast_impl`` that converts bf16 by value (the interpreter's casts move or truncate bits)."""

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        dst = dst_type.scalar
        if not (_is_bf16(src) or dst == tl.bfloat16):
            return original(self, src, dst_type)
        values = bf16_to_f32(src.data) if _is_bf16(src) else src.data
        if dst == tl.bfloat16:
            return TensorHandle(to_bf16(values), tl.bfloat16)
        with np.errstate(over="ignore", invalid="ignore"):
            return TensorHandle(values.astype(compat.np_dtype(dst_type)), dst)

    return cast_impl


def _bf16_reduce_result(op: Any, tensor: Any, data: np.ndarray) -> Any:
    return op.to_tensor(to_bf16(data), tensor.dtype)


def bf16_sum(original: Callable[..., Any]) -> Callable[..., Any]:
    """Sums of bf16 accumulate in fp32 and round once (the GPU's reduction order is unspecified anyway)."""

    def sum(self: Any, input: Any) -> Any:  # noqa: A001 (the interpreter's method name)
        if input.dtype != tl.bfloat16:
            return original(self, input)
        total = np.sum(bf16_to_f32(input.handle.data), axis=self.axis, keepdims=self.keep_dims)
        return _bf16_reduce_result(self, input, total)

    return sum


def bf16_min_max(original: Callable[..., Any]) -> Callable[..., Any]:
    """min/max/argmin/argmax of bf16 compare values, not bit patterns (negative values sort last as bits)."""

    def min_max(self: Any, input: Any, val_reduce_op: Any, idx_reduce_op: Any = None) -> Any:
        tensor = input[0] if isinstance(input, tuple) else input
        if tensor.dtype != tl.bfloat16:
            return original(self, input, val_reduce_op, idx_reduce_op)
        values = bf16_to_f32(tensor.handle.data)
        val = idx = None
        if val_reduce_op:
            val = _bf16_reduce_result(
                self, tensor, val_reduce_op(values, axis=self.axis, keepdims=self.keep_dims)
            )
        if idx_reduce_op:
            idx = self.to_tensor(idx_reduce_op(values, axis=self.axis, keepdims=self.keep_dims), tl.int32)
        if val is not None and idx is not None:
            return val, idx
        return val if val is not None else idx

    return min_max


def bf16_scan(original: Callable[..., Any], numpy_scan: Callable[..., np.ndarray]) -> Callable[..., Any]:
    """cumsum/cumprod of bf16: every prefix computed in fp32 and rounded to bf16."""

    def scan(self: Any, input: Any) -> Any:
        if input.dtype != tl.bfloat16:
            return original(self, input)
        out = numpy_scan(bf16_to_f32(input.handle.data), axis=self.axis)
        return [self.to_tensor(to_bf16(out), input.dtype)]

    return scan


# Triton's semantics allows only atomic_add on bf16 (atomic_max/min/xchg reject it before the builder).
_RMW_BF16: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {"FADD": np.add}


def bf16_atomic_rmw(original: Callable[..., Any]) -> Callable[..., Any]:
    """bf16 atomic_add (the interpreter's C atomics reject 16-bit floats).

    Programs run one after another, so lanes are applied in order; a lane that hits an address an earlier
    lane of the same call updated sees that update, as it would after the hardware serialised them.
    """

    def create_atomic_rmw(self: Any, rmwOp: Any, ptr: Any, val: Any, mask: Any, *rest: Any) -> Any:  # noqa: N803
        name = str(getattr(rmwOp, "name", rmwOp)).upper()
        if not (ptr.get_element_ty() == tl.bfloat16 and name in _RMW_BF16):
            return original(self, rmwOp, ptr, val, mask, *rest)
        shape = np.broadcast_shapes(np.shape(ptr.data), np.shape(val.data), np.shape(mask.data))
        ptrs = np.broadcast_to(ptr.data, shape).ravel()
        values = np.broadcast_to(bf16_to_f32(val.data), shape).ravel()
        active = np.broadcast_to(mask.data, shape).ravel()
        old = np.zeros(ptrs.shape, dtype=np.uint16)
        op = _RMW_BF16[name]
        for i in np.flatnonzero(active):
            cell = np.frombuffer(_memory(int(ptrs[i]), 2), dtype=np.uint16)
            old[i] = cell[0]
            cell[0] = to_bf16(np.asarray(op(bf16_to_f32(cell[:1]), values[i : i + 1]), dtype=np.float32))[0]
        return TensorHandle(old.reshape(shape), tl.bfloat16)

    return create_atomic_rmw


def _memory(address: int, size: int) -> memoryview:
    return memoryview((ctypes.c_char * size).from_address(address)).cast("B")


# ---------------------------------------------------------------------------------------------------------
# libdevice


def _f64(fn: Callable[..., Any]) -> Callable[..., np.ndarray]:
    def run(*args: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return cast("np.ndarray", fn(*[np.asarray(a, dtype=np.float64) for a in args]))

    return run


def _per_element(fn: Callable[..., float]) -> Callable[..., np.ndarray]:
    ufunc = np.frompyfunc(fn, 1, 1)

    def run(x: np.ndarray) -> np.ndarray:
        return np.asarray(ufunc(x), dtype=np.float64)

    return run


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return cast("np.ndarray", np.copysign(np.floor(np.abs(x) + 0.5), x))


def _safe_gamma(x: float) -> float:
    try:
        return math.gamma(x)
    except (ValueError, OverflowError):
        return math.inf if x > 0 else math.nan


def _safe_lgamma(x: float) -> float:
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):
        return math.inf


# libdevice functions by name without the "__nv_" prefix; a trailing "f" (the fp32 variant) is tried
# without it. Each computes in fp64 and the result is rounded to the declared return type: within the few
# ulp libdevice itself guarantees. Rounding-mode variants other than round-to-nearest have no entry.
_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "exp": np.exp,
    "exp2": np.exp2,
    "exp10": lambda x: np.power(10.0, x),
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "cbrt": np.cbrt,
    "rcbrt": lambda x: 1.0 / np.cbrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "sinpi": lambda x: np.sin(np.pi * x),
    "cospi": lambda x: np.cos(np.pi * x),
    "erf": _per_element(math.erf),
    "erfc": _per_element(math.erfc),
    "lgamma": _per_element(_safe_lgamma),
    "tgamma": _per_element(_safe_gamma),
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "round": _round_half_away,
    "rint": np.rint,
    "nearbyint": np.rint,
    "fabs": np.abs,
    "abs": np.abs,
    "saturate": lambda x: np.clip(x, 0.0, 1.0),
    "frcp_rn": lambda x: 1.0 / x,
    "drcp_rn": lambda x: 1.0 / x,
    "fsqrt_rn": np.sqrt,
    "dsqrt_rn": np.sqrt,
    "fast_exp": np.exp,
    "fast_exp10": lambda x: np.power(10.0, x),
    "fast_log": np.log,
    "fast_log2": np.log2,
    "fast_log10": np.log10,
    "fast_sin": np.sin,
    "fast_cos": np.cos,
    "fast_tan": np.tan,
}
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "pow": np.power,
    "powi": np.power,
    "fast_pow": np.power,
    "atan2": np.arctan2,
    "fmin": np.fmin,
    "fmax": np.fmax,
    "fmod": np.fmod,
    "remainder": lambda x, y: x - y * np.rint(x / y),
    "hypot": np.hypot,
    "copysign": np.copysign,
    "fdim": lambda x, y: np.where(x > y, x - y, 0.0),
    "nextafter": np.nextafter,
    "fdiv_rn": np.divide,
    "ddiv_rn": np.divide,
    "fast_fdivide": np.divide,
    "fadd_rn": np.add,
    "dadd_rn": np.add,
    "fmul_rn": np.multiply,
    "dmul_rn": np.multiply,
    "ldexp": lambda x, n: np.ldexp(x, n.astype(np.int32)),
    "scalbn": lambda x, n: np.ldexp(x, n.astype(np.int32)),
}
_TERNARY: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "fma": lambda x, y, z: x * y + z,
    "fma_rn": lambda x, y, z: x * y + z,
}
_PREDICATES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
    "isfinited": np.isfinite,
    "finite": np.isfinite,
    "signbit": np.signbit,
}


def _libdevice_impl(symbol: str) -> Callable[..., np.ndarray] | None:
    name = symbol.removeprefix("__nv_")
    for candidate in (name, name[:-1] if name.endswith("f") else None):
        if not candidate:
            continue
        for table in (_UNARY, _BINARY, _TERNARY):
            if candidate in table:
                return _f64(table[candidate])
        if candidate in _PREDICATES:
            predicate = _PREDICATES[candidate]
            return lambda x, p=predicate: p(np.asarray(x)).astype(np.int32)
    return None


def extern_elementwise(
    self: Any, libName: Any, libPath: Any, symbol: str, argList: Any, retType: Any, isPure: Any
) -> Any:  # noqa: N803 (Triton's names)
    """The interpreter's missing ``create_extern_elementwise``: the libdevice symbol computed with numpy."""
    impl = _libdevice_impl(symbol)
    if impl is None:
        raise UnsupportedConstruct(f"libdevice function {symbol}")
    args = [bf16_to_f32(a.data) if _is_bf16(a) else a.data for a in argList]
    out = np.asarray(impl(*args))
    element = retType.scalar
    if element == tl.bfloat16:
        return TensorHandle(to_bf16(out), element)
    with np.errstate(over="ignore", invalid="ignore"):
        return TensorHandle(out.astype(compat.np_dtype(element)), element)


_wrapped_externs: dict[int, Callable[..., Any]] = {}


def _interpreted_extern(builtin: Any) -> Callable[..., Any]:
    """A backend libdevice builtin callable from interpreted code (it needs the interpreter's semantic).

    The wrapper claims the stub module as its ``__module__``: Triton's dependency walker skips those, so a
    cache key computed by another thread during the launch is the one it would be without TileLens.
    """
    wrapper = _wrapped_externs.get(id(builtin))
    if wrapper is None:

        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.pop("_semantic", None)
            return builtin(*args, _semantic=compat.interpreter_semantic(), **kwargs)

        call.__name__ = call.__qualname__ = getattr(builtin, "__name__", "libdevice")
        call.__module__ = compat.LIBDEVICE_STUB_MODULE
        call._tilelens_builtin = builtin  # type: ignore[attr-defined]  # keeps id(builtin) alive and unique
        wrapper = _wrapped_externs[id(builtin)] = call
    return wrapper


_interpreted_modules: dict[int, types.ModuleType] = {}


def interpreted_libdevice(backend: Any) -> types.ModuleType:
    """Stands in for a libdevice module named in a kernel's globals (``libdevice.tanh(x)``).

    A real module object (cached per backend): Triton's dependency walker skips modules, so a cache key that
    another thread computes during the launch is unchanged.
    """
    module = _interpreted_modules.get(id(backend))
    if module is None:
        module = types.ModuleType(compat.LIBDEVICE_STUB_MODULE)
        for name, value in vars(backend).items():
            if compat.is_builtin(value):
                setattr(module, name, _interpreted_extern(value))
        module._tilelens_backend = backend  # type: ignore[attr-defined]
        _interpreted_modules[id(backend)] = module
    return module


def global_names(code: Any) -> set[str]:
    """Every global name a function's code (and code nested in it) can look up."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= global_names(const)
    return names


def libdevice_redirects(
    fn_globals: dict[str, Any], names: set[str] | None = None
) -> Iterator[tuple[str, Any]]:
    """(name, replacement) for each libdevice reference in an interpreted function's globals.

    ``names`` limits the scan to the globals the function uses: a module such as Liger's imports hundreds of
    names, and the scan runs for every launch.

    Compiled Triton on an NVIDIA GPU resolves the stubs of ``triton.language.extra.libdevice`` to the CUDA
    backend's functions; the same resolution happens here. Direct imports of a backend's libdevice
    (``triton.language.extra.cuda.libdevice``) only need the interpreter's semantic.
    """
    backend = compat.libdevice_backend()
    if backend is None:
        return
    modules = compat.libdevice_modules()
    items = (
        list(fn_globals.items()) if names is None else [(n, fn_globals[n]) for n in names if n in fn_globals]
    )
    for name, value in items:
        if inspect.ismodule(value):
            if any(value is m for m in modules):
                target = backend if value.__name__ == compat.LIBDEVICE_STUB_MODULE else value
                yield name, interpreted_libdevice(target)
            continue
        # Stubs and the backends' builtins are plain functions; so are the wrappers already put in place.
        if not inspect.isfunction(value) or getattr(value, "_tilelens_builtin", None) is not None:
            continue
        module = value.__module__
        if module == compat.LIBDEVICE_STUB_MODULE:
            real = getattr(backend, getattr(value, "__name__", name), None)
            if real is not None:
                yield name, _interpreted_extern(real)
        elif module in compat.LIBDEVICE_BACKEND_MODULES and compat.is_builtin(value):
            yield name, _interpreted_extern(value)


# ---------------------------------------------------------------------------------------------------------
# Failures
