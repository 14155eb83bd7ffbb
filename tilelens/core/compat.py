"""Every difference between the Triton versions TileLens supports (3.6 through 3.9), in one place.

Other modules import Triton internals only through here, so a new Triton release means reading one file.
"""

from __future__ import annotations

import inspect
import re
import sys
import textwrap
from typing import Any, cast

# `X as X` and the `tl` assignment mark these as re-exported (mypy's no_implicit_reexport): other modules
# reach Triton only through this one.
import torch as _torch
import triton as triton
import triton.language as _tl
from triton import knobs as knobs
from triton.language import semantic as _semantic
from triton.runtime import autotuner as _autotuner
from triton.runtime import interpreter as _interpreter
from triton.runtime import jit as _jit

TRITON_VERSION: tuple[int, int] = tuple(int(p) for p in triton.__version__.split(".")[:2])  # type: ignore[assignment]
SUPPORTED = (3, 6) <= TRITON_VERSION < (3, 10)

tl = _tl

JITFunction = _jit.JITFunction
KernelInterface = _jit.KernelInterface
Autotuner = _autotuner.Autotuner
Heuristics = _autotuner.Heuristics
InterpretedFunction = _interpreter.InterpretedFunction
InterpreterBuilder = _interpreter.InterpreterBuilder
InterpreterError = _interpreter.InterpreterError
# Triton 3.7 on register every JITFunction by "module:qualname"; 3.6 keeps no registry.
jit_registry: dict[str, Any] | None = getattr(_jit, "_triton_jit_function_registry", None)

# Triton 3.9 removed block pointers in favour of tensor descriptors: ``tl.make_block_ptr`` and ``tl.advance``
# are still there, but raise NotImplementedError ("Block pointers have been removed in favor of the tensor
# descriptor API"); ``tl.load``/``tl.store`` lost ``boundary_check``/``padding_option`` for them.
HAS_BLOCK_POINTERS = TRITON_VERSION < (3, 9)
NO_BLOCK_POINTERS = (
    f"Triton {triton.__version__} removed block pointers (tl.make_block_ptr and tl.advance raise "
    "NotImplementedError; tensor descriptors replace them)"
)

# The autotune listener knob exists from Triton 3.8 on.
HAS_AUTOTUNE_LISTENER = hasattr(knobs.autotuning, "listener")

# Triton 3.6's interpreter turns a scalar tensor into an index (``range(0, n, BLOCK)`` over a runtime ``n``,
# any ``operator.index``) with ``int(handle.data)``, and scalars are arrays of shape (1,): numpy >= 2.4 refuses
# that ("only 0-dimensional arrays can be converted to Python scalars"). 3.7 on squeeze the array first,
# which is what ``launch_patches`` installs for 3.6 (the same value under every numpy). ``_patch_lang_tensor``
# is the function, same name in 3.6 through 3.9, where the interpreter sets ``tl.tensor.__index__``.
INDEX_NEEDS_SQUEEZE = TRITON_VERSION < (3, 7)
PATCH_LANG_TENSOR = "_patch_lang_tensor"

# Class methods where every memory access of the interpreter ends, in every supported version:
# plain, block-pointer (3.6 routes create_tensor_pointer_* here), descriptor and gather/scatter paths.
ACCESS_METHODS = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")

# Modules and classes whose attributes the interpreter patches for the length of a launch.
LANG_NAMESPACES: tuple[Any, ...] = (tl, tl.core, tl.math, tl.tensor, tl.core.tensor_descriptor_base)


def is_gluon(fn: Any) -> bool:
    return bool(getattr(fn, "is_gluon", lambda: False)())


def autotune_key(autotuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The tuning key exactly as ``Autotuner.run`` builds it (same in 3.6 and 3.8)."""
    if not kwargs:  # the common call: positional arguments only, every one named (the same key, fewer dicts)
        named = dict(zip(autotuner.arg_names, args))
        key = [named[k] for k in autotuner.keys if k in named]
        key.extend(str(v.dtype) for v in named.values() if hasattr(v, "dtype"))
        return tuple(key)
    nargs = dict(zip(autotuner.arg_names, args))
    all_args = {**nargs, **kwargs}
    named = {k: v for k, v in all_args.items() if k in autotuner.arg_names}
    key = [named[k] for k in autotuner.keys if k in named]
    key.extend(str(v.dtype) for v in named.values() if hasattr(v, "dtype"))
    return tuple(key)


def autotune_key_plan(autotuner: Any) -> tuple[int, ...]:
    """Positions in ``autotuner.arg_names`` of its tuning keys, in key order (``autotune_key_positional``)."""
    names = list(autotuner.arg_names)
    return tuple(names.index(k) for k in autotuner.keys if k in names)


_KEY_DTYPES: dict[Any, str] = {}  # torch dtype -> str(dtype), as the key holds it
_NO_DTYPE = (int, float, bool, str, type(None))  # plain values: never a ``dtype`` attribute


def autotune_key_positional(plan: tuple[int, ...], arg_names: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``autotune_key(autotuner, args, {})`` for a call with positional arguments only, ``plan`` being
    ``autotune_key_plan(autotuner)``: the same tuple, without the per-call dicts and ``hasattr`` on every
    argument (a plain tensor's dtype text is cached; other objects are asked as Triton asks them)."""
    n = min(len(args), len(arg_names))
    key = [args[i] for i in plan if i < n]
    tensor = _torch.Tensor
    for v in args[:n] if n < len(args) else args:
        cls = type(v)
        if cls is tensor:
            dtype = v.dtype
            text = _KEY_DTYPES.get(dtype)
            if text is None:
                text = _KEY_DTYPES[dtype] = str(dtype)
            key.append(text)
        elif cls in _NO_DTYPE:
            continue
        elif hasattr(v, "dtype"):
            key.append(str(v.dtype))
    return tuple(key)


def used_config(autotuner: Any, key: Any) -> Any:
    """The config ``autotuner`` launches a call with: its cache's entry for the call's tuning ``key`` when it
    tunes (3.6 through 3.9: ``config = self.cache[key]`` with more than one config), its one config when it has
    one. ``best_config`` only when neither is known: every thread's call of the autotuner sets that attribute,
    so read during or after a launch it may be another thread's choice."""
    if key is not None:
        cache = getattr(autotuner, "cache", None)
        try:
            config = cache.get(key) if isinstance(cache, dict) else None
        except TypeError:  # an unhashable key
            config = None
        if config is not None:
            return config
    configs = getattr(autotuner, "configs", None)
    if isinstance(configs, list) and len(configs) == 1:
        return configs[0]
    return getattr(autotuner, "best_config", None)


def jit_source(fn: Any) -> str:
    """The source Triton compiles for a JIT function: its ``src`` (``_src`` in older releases). An
    ``InterpretedFunction`` (what ``triton.jit`` returns under ``TRITON_INTERPRET=1``) keeps none: its
    function's source, cut at ``def`` as ``JITFunction`` cuts it; "" when there is none to read."""
    src = getattr(fn, "src", None)
    if src is None:
        src = getattr(fn, "_src", None)
    if src is None and isinstance(fn, InterpretedFunction):
        try:
            text = textwrap.dedent(inspect.getsource(fn.fn))
        except (OSError, TypeError):
            return ""
        found = re.search(r"^def\s+\w+\s*\(", text, re.MULTILINE)
        src = text[found.start() :] if found else ""
    return cast(str, src or "")


def runtime_interpret_scope() -> Any:
    """Snapshot and restore Triton's runtime knobs (and their environment variables)."""
    return knobs.runtime.scope()


def with_data(handle: Any, data: Any) -> Any:
    """A copy of an interpreter ``TensorHandle`` holding ``data`` (its fields differ between releases).

    Descriptor stores hand the builder a bare numpy mask (whose ``.data`` is its buffer): that stays bare.
    """
    import copy

    import numpy as np

    if isinstance(handle, np.ndarray):
        return np.ascontiguousarray(data)
    out = copy.copy(handle)
    out.data = data
    return out


def element_bytes(tl_dtype: Any) -> int:
    bits = getattr(tl_dtype, "primitive_bitwidth", None)
    if bits is None:  # pointer element types
        bits = 64
    return max(1, bits // 8)


# The interpreter internals TileLens's semantic fixes replace for the length of a launch (same names in 3.6
# through 3.9): argument conversion, builtin patching, reductions and scans, the handle type.
interpreter_module = _interpreter
# The language front end's class (3.6 through 3.9): the interpreter's semantic is an instance of it.
TritonSemantic = _semantic.TritonSemantic
# Triton's own tuple value class (a block type's shape is one in 3.8); None where a release has none.
tl_tuple: type | None = getattr(_tl.core, "tuple", None)
TensorHandle = _interpreter.TensorHandle
TensorDescHandle = _interpreter.TensorDescHandle
ReduceOps = _interpreter.ReduceOps
ScanOps = _interpreter.ScanOps
is_builtin = tl.core.is_builtin


def np_dtype(tl_dtype: Any) -> Any:
    """The numpy dtype the interpreter stores a Triton type in (bf16 as uint16, fp8 as uint8)."""
    return _interpreter._get_np_dtype(tl_dtype)


def interpreter_semantic() -> Any:
    return _interpreter.interpreter_semantic


def number_type(semantic: Any, x: int | float) -> Any:
    """The Triton type the front end gives the Python number ``x`` (``to_tensor``'s choice), raising what it
    raises: 3.7 on asks ``to_tensor_type``; 3.6 has none, so it builds the constant and takes its type."""
    if _HAS_TO_TENSOR_TYPE:
        return semantic.to_tensor_type(x)
    return semantic.to_tensor(x).type


_HAS_TO_TENSOR_TYPE = hasattr(_semantic.TritonSemantic, "to_tensor_type")


# libdevice: compiled Triton maps the stubs module to a backend's library (the CUDA backend's
# get_module_map); the interpreter resolves them to the CUDA one too, where this Triton build has it.
LIBDEVICE_STUB_MODULE = "triton.language.extra.libdevice"
LIBDEVICE_BACKEND_MODULES = ("triton.language.extra.cuda.libdevice", "triton.language.extra.hip.libdevice")


def libdevice_modules() -> tuple[Any, ...]:

    names = (LIBDEVICE_STUB_MODULE, *LIBDEVICE_BACKEND_MODULES)
    return tuple(sys.modules[n] for n in names if n in sys.modules)


def libdevice_backend() -> Any:
    try:
        from triton.language.extra.cuda import libdevice
    except ImportError:  # a Triton build without the CUDA backend
        return None
    return libdevice


# ---------------------------------------------------------------------------------------------------------
# Gluon (triton.experimental.gluon). Imported lazily: only Gluon launches need it, and it costs read commands
# 40 ms. The language is the same family in 3.6 through 3.9 (the simulator runs Gluon's own builtins); what
# differs between releases is named here.

GLUON_LANGUAGE = "triton.experimental.gluon.language"


def gluon_language() -> Any:
    import triton.experimental.gluon.language as gl

    return gl


def gluon_core() -> Any:
    from triton.experimental.gluon.language import _core

    return _core


def gluon_semantic_class() -> Any:
    from triton.experimental.gluon.language._semantic import GluonSemantic

    return GluonSemantic


def gluon_host_descriptor_classes() -> tuple[type, ...]:
    """Gluon's host-side TMA descriptor classes (``TensorDescriptorIm2Col`` exists from 3.8 on)."""
    try:
        from triton.experimental.gluon.nvidia import hopper
    except ImportError:
        return ()
    names = ("TensorDescriptor", "TensorDescriptorIm2Col")
    return tuple(getattr(hopper, name) for name in names if hasattr(hopper, name))


def gluon_descriptor_value(handle: Any, shape: Any, strides: Any, block_type: Any, layout: Any) -> Any:
    """A Gluon ``tensor_descriptor`` value, as kernels receive one (same constructor in 3.6 through 3.9)."""
    from triton.experimental.gluon.language.nvidia.hopper import tma

    return tma.tensor_descriptor(handle, shape, strides, block_type, layout)


# The interpreter builder's memory methods (triton/runtime/interpreter.py; read in 3.6, 3.8 and 3.9). 3.6
# through 3.8 take the cache modifier and the eviction policy as two arguments: ``create_load(ptr, _0, _1,
# is_volatile)``, ``create_store(ptr, val, _0, _1)``, ``create_masked_load(ptrs, mask, other,
# cache_modifier, eviction_policy, is_volatile)``, ``create_masked_store(ptrs, value, mask, cache_modifier,
# eviction_policy)``, ``create_descriptor_load(desc, indices, cache_modifier, eviction_policy)``. 3.9 folds
# them into one ``cache_policy`` (what ``get_cache_policy(cache_modifier, eviction_policy)`` gives: None in
# the interpreter): ``create_load(ptr, cache_policy, is_volatile)``, ``create_store(ptr, val,
# cache_policy)``, ``create_masked_load(ptrs, mask, other, cache_policy, is_volatile)``,
# ``create_masked_store(ptrs, value, mask, cache_policy)``, ``create_descriptor_load(desc, indices,
# cache_policy)``. Methods that wrap them take the leading operands by name and pass the rest through
# (tests/unit/test_compat.py checks these signatures against the installed Triton).
CACHE_POLICY_ARGUMENT = TRITON_VERSION >= (3, 9)
# The arguments after the operands that the interpreter's own callers pass (no hints; not volatile).
LOAD_HINTS: tuple[Any, ...] = (None, False) if CACHE_POLICY_ARGUMENT else (None, None, False)
STORE_HINTS: tuple[Any, ...] = (None,) if CACHE_POLICY_ARGUMENT else (None, None)

# The C++ memory functions behind them (``triton._C.libtriton.interpreter``'s ``load``, ``store``,
# ``atomic_rmw``) take any integer mask in 3.6 through 3.8 (nonzero: active); 3.9's raise "mask has
# unsupported dtype" for anything but a bool mask. The interpreter makes integer masks itself: ``binary_op``
# types a comparison's handle with its left operand's type (a bool array under ``int32``), ``create_splat``
# fills with the handle's type, so ``(offs < n) & (row < m)`` with a scalar ``row`` is an int32 mask, and
# 3.9's stock interpreter fails there.
MASKS_MUST_BE_BOOL = TRITON_VERSION >= (3, 9)

# The interpreter's tensor descriptor, ``TensorDescHandle``: ``(base, shape, strides, block_shape, padding)``
# in 3.6 through 3.8; 3.9 adds ``round_f32_to_tf32`` (its descriptor load rounds fp32 results to tf32 after
# the masked load where set). ``materialize_pointers(offsets)`` (the descriptor load and store call it, then
# the masked load / store) returns ``(pointers handle, mask)``, the same arithmetic in all three: the mask a
# bare bool array in 3.6 through 3.8, a ``TensorHandle`` of ``tl.int1`` in 3.9.
DESCRIPTOR_TF32 = TRITON_VERSION >= (3, 9)
DESCRIPTOR_MASK_IS_HANDLE = TRITON_VERSION >= (3, 9)


def descriptor_fields(desc: Any) -> tuple[Any, ...]:
    """The arguments that construct a ``TensorDescHandle`` equal to ``desc``."""
    fields = (desc.base, desc.shape, desc.strides, desc.block_shape, desc.padding)
    return (*fields, desc.round_f32_to_tf32) if DESCRIPTOR_TF32 else fields


def descriptor_mask(mask: Any) -> Any:
    """The bool array ``mask`` as this release's ``materialize_pointers`` returns a mask."""
    return TensorHandle(mask, _tl.int1) if DESCRIPTOR_MASK_IS_HANDLE else mask


# 3.9 adds ``tl.atomic_load``/``atomic_store``/``atomic_poll``. Its builder's ``create_atomic_load(ptr, mask,
# sem, scope)`` calls ``create_masked_load(ptr, mask, None, None, True)``, ``create_atomic_store(ptr, val,
# mask, sem, scope)`` calls ``create_masked_store(ptr, val, mask, None)``, and ``create_atomic_poll(ptr,
# expected, timeout_ns, sem, scope)`` loads each element with ``create_load(element, None, True)`` until it
# equals ``expected`` (or the timeout passes): every access still ends in ``ACCESS_METHODS``.
HAS_ATOMIC_LOAD_STORE = hasattr(_tl, "atomic_load")
ATOMIC_LOAD_STORE_METHODS = ("create_atomic_load", "create_atomic_store", "create_atomic_poll")


def interpreter_masked_load(builder: Any, ptrs: Any, mask: Any, other: Any) -> Any:
    return builder.create_masked_load(ptrs, mask, other, *LOAD_HINTS)


def interpreter_masked_store(builder: Any, ptrs: Any, value: Any, mask: Any) -> Any:
    return builder.create_masked_store(ptrs, value, mask, *STORE_HINTS)


def interpreter_atomic_rmw(builder: Any, op: Any, ptrs: Any, value: Any, mask: Any) -> Any:
    from triton._C.libtriton import ir

    return builder.create_atomic_rmw(op, ptrs, value, mask, ir.MEM_SEMANTIC.RELAXED, ir.MEM_SYNC_SCOPE.GPU)


def tma_reduce_to_rmw(kind: Any, element: Any) -> Any:
    """The atomic op a TMA reduction (``DESCRIPTOR_REDUCE_KIND``) applies to each element."""
    from triton._C.libtriton import ir

    name = str(getattr(kind, "name", kind)).upper()
    if name == "ADD":
        return ir.ATOMIC_OP.FADD if element.is_floating() else ir.ATOMIC_OP.ADD
    if name in ("MIN", "MAX") and element.is_int():
        return getattr(ir.ATOMIC_OP, ("U" if element.is_int_unsigned() else "") + name)
    if name in ("AND", "OR", "XOR") and element.is_int():
        return getattr(ir.ATOMIC_OP, name)
    raise NotImplementedError(f"TMA reduction {name} of {element}")


def gluon_api() -> dict[str, Any]:
    """Gluon builtins whose names moved between releases, under one name each (kernels, tests, scripts).

    ``cta_barrier``: ``gl.thread_barrier`` (3.6) became ``gl.barrier`` (3.8). ``tma_load``/``tma_store``:
    ``tma.async_copy_global_to_shared``/``async_copy_shared_to_global`` (3.6, 3.8) became ``tma.async_load``/
    ``async_store`` (3.8; 3.9 removed the old names). ``reinterpret``: the shared-memory descriptor method
    ``_reinterpret`` (3.6 to 3.8) became ``reinterpret`` (3.9); its name, for kernels that branch on it.
    """
    gl = gluon_language()
    from triton.experimental.gluon.language.nvidia.hopper import tma

    return {
        "cta_barrier": getattr(gl, "barrier", None) or gl.thread_barrier,
        "tma_load": getattr(tma, "async_load", None) or tma.async_copy_global_to_shared,
        "tma_store": getattr(tma, "async_store", None) or tma.async_copy_shared_to_global,
        "reinterpret": (
            "reinterpret" if hasattr(gl.shared_memory_descriptor, "reinterpret") else "_reinterpret"
        ),
    }


# How the interpreter passes its semantic to the tl builtins it patches: from 3.7 on through the module global
# ``interpreter_semantic`` (read at each call); 3.6 binds a fresh ``TritonSemantic(builder)`` per builtin when
# it patches. The Gluon simulator swaps that semantic, so on 3.6 it also replaces ``_patch_attr``.
INTERPRETER_SEMANTIC_IS_GLOBAL = TRITON_VERSION >= (3, 7)


# -- compiled launches (``backend="compiled"``) ------------------------------------------------------------


def run_compiled(jit_fn: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
    """Launch ``jit_fn`` compiled, exactly as ``kernel[grid](*args, **kwargs)`` would; returns Triton's
    ``CompiledKernel`` (3.6 through 3.9: ``JITFunction.run`` returns it)."""
    run = JITFunction.run
    run = getattr(run, "__wrapped__", run)  # Triton's own, also while TileLens intercepts launches
    return run(jit_fn, *args, grid=grid, warmup=False, **kwargs)


# ``JITFunction.run`` (3.6 through 3.9) binds every parameter (defaults applied) into a dict, looks the kernel
# up (compiling on a miss), then calls a callable grid once with that dict (``grid = grid(bound_args)``) just
# before the launch. A compiled recording reads the arguments there instead of binding them a second time
# (``compiled_frames.GridProbe``); a Triton that stopped doing so would leave the router binding them itself.
GRID_RECEIVES_BOUND_ARGS = True


def compile_metadata(kernel: Any) -> dict[str, Any]:
    """What a ``CompiledKernel`` tells about itself: shared memory, registers and spills (where the driver
    filled them: 3.6 through 3.9 set ``n_regs``/``n_spills`` when the kernel's handles are initialised, at its
    first launch), warps, stages, CTAs and the compile target. Missing attributes are left out."""
    out: dict[str, Any] = {}
    meta = getattr(kernel, "metadata", None)
    for name in ("shared", "num_warps", "num_stages", "num_ctas", "maxnreg"):
        value = getattr(meta, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    target = getattr(meta, "target", None)
    arch = getattr(target, "arch", None)
    if arch is not None:
        out["arch"] = str(arch)
    for name in ("n_regs", "n_spills", "n_max_threads"):
        value = getattr(kernel, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            out[name] = value
    return out


AUTOTUNER_BENCH = "_bench"  # Autotuner's per-config benchmark method, same name in 3.6 through 3.9
