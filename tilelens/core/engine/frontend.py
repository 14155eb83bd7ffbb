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
* ``tl.tensor.__init__`` rebuilds the shape (a ``constexpr`` per dimension, a ``tl.tuple`` and its type) for
  every value: built once per (shared) type object instead (``cached_tensor_init``).
* ``index_through_squeeze``: Triton 3.6's tensor patching with 3.7's ``__index__`` (numpy >= 2.4).
* ``_unwrap_if_constexpr`` (every builtin runs it on its arguments) tests a value against four classes before
  returning it: a ``constexpr`` (exactly that class) gives its ``value``, a tensor, number, string or None
  itself, at once; everything else (lists, tuples, subclasses) goes to Triton's function.
* ``patch_attr``: the interpreter's ``_patch_attr`` wraps every ``tl`` builtin in a lambda that copies the
  keyword arguments through a dict comprehension (to drop a ``_semantic``) and then calls the builtin's
  ``@builtin`` wrapper, which only checks that ``_semantic`` is given and not None. The replacement passes
  the same arguments (``_semantic`` replaced, last) and, where the member is exactly such a wrapper and the
  semantic is not None, calls the function it wraps directly. Where the semantic comes from (the module
  global read at each call, or one bound per builtin) is ``compat.INTERPRETER_SEMANTIC_IS_GLOBAL``;
  ``patch_attr_matches`` checks the replacement against Triton's once, before it is installed.

Invariant: every replacement returns what Triton's function returns, or raises what it raises, for every
input; it is only cheaper.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any

from tilelens.core import compat

_MAX_CACHED = 4096
_TL_TUPLE = compat.tl_tuple


def _remember(cache: dict[Any, Any], key: Any, make: Callable[[], Any]) -> Any:
    """``cache[key]``, made by ``make()`` on a miss; the cache is emptied first when it holds ``_MAX_CACHED``
    entries (block types name their shapes: the distinct ones kept are bounded). Errors are not remembered."""
    found = cache.get(key)
    if found is None:
        found = make()
        if len(cache) >= _MAX_CACHED:
            cache.clear()
        cache[key] = found
    return found


def cached_np_dtype(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``_get_np_dtype`` memoised by the Triton type's (class, name); misses ask ``original``."""
    cache: dict[tuple[type, str], Any] = {}

    def _get_np_dtype(tt_dtype: Any) -> Any:
        name = getattr(tt_dtype, "name", None)
        if type(name) is not str:
            return original(tt_dtype)
        return _remember(cache, (type(tt_dtype), name), lambda: original(tt_dtype))

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
        return _remember(cache, (type(dtype), name, dims), lambda: original(self, dtype, shape))

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
        return _remember(cache, key, lambda: original(self, scalar_ty))

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


def cached_tensor_init(original: Callable[..., Any], tuple_cls: Any) -> Callable[..., Any]:
    """``tl.tensor.__init__`` building the shape from what the first tensor of the same type object got.

    Triton's constructor makes a ``constexpr`` per dimension, one for ``numel`` and a ``tl.tuple`` whose type
    it derives value by value: for every value an operation produces, ~15% of a loop kernel's interpretation.
    Types are shared now (``cached_block_ty``), so per type object (held, so its id is never reused while
    cached) the first tensor's pieces are kept: later tensors get a fresh ``tl.tuple`` (its own list of the same
    ``constexpr`` values, the same tuple type), the same ``numel`` constexpr and ``dtype`` (the type's scalar)
    — equal attributes, in the same order. ``constexpr`` and the types are never modified after construction.
    """
    known: dict[int, tuple[Any, list[Any], Any, Any, Any]] = {}
    make = tuple_cls.__new__

    def __init__(self: Any, handle: Any, type: Any) -> None:  # noqa: A002 - Triton's parameter name
        entry = known.get(id(type))
        if entry is None or entry[0] is not type:
            original(self, handle, type)
            shape: Any = self.__dict__.get("shape")
            if builtins.type(shape) is tuple_cls and set(vars(shape)) == {"values", "type"}:
                if len(known) >= _MAX_CACHED:
                    known.clear()
                known[id(type)] = (type, list(shape.values), shape.type, self.numel, self.dtype)
            return
        shape = make(tuple_cls)
        shape.values = list(entry[1])
        shape.type = entry[2]
        self.handle = handle
        self.shape = shape
        self.numel = entry[3]
        self.type = type
        self.dtype = entry[4]

    return __init__


def fast_unwrap(
    original: Callable[[Any], Any], constexpr_cls: type, tensor_cls: type
) -> Callable[[Any], Any]:
    """``_unwrap_if_constexpr`` answering the common classes without Triton's ``isinstance`` chain."""
    plain = frozenset({tensor_cls, int, float, bool, str, type(None)})

    def _unwrap_if_constexpr(o: Any) -> Any:
        kind = type(o)
        if kind is constexpr_cls:
            return o.value
        if kind in plain:
            return o
        return original(o)

    return _unwrap_if_constexpr


_BUILTIN_CODE = compat.tl.core.builtin(lambda: None).__code__  # the code of every ``@builtin`` wrapper
_UNWRAPPED: dict[int, tuple[Any, Any]] = {}  # id(member) -> (member, the function it wraps or None)
_GLOBAL = object()  # a wrapper's semantic is the interpreter module's global, read at each call


def _wrapped(member: Any) -> Any:
    """The function a ``@builtin`` wrapper calls, or None where ``member`` is not exactly such a wrapper."""
    known = _UNWRAPPED.get(id(member))
    if known is not None and known[0] is member:
        return known[1]
    fn = None
    if getattr(member, "__code__", None) is _BUILTIN_CODE:
        cell = dict(zip(member.__code__.co_freevars, member.__closure__ or ())).get("fn")
        fn = None if cell is None else cell.cell_contents
    _remember(_UNWRAPPED, id(member), lambda: (member, fn))
    return fn


def _member_wrapper(module: Any, member: Any, bound: Any) -> Callable[..., Any]:
    """What Triton's patching makes of ``member``, cheaper: the semantic is ``bound``, or ``_GLOBAL``."""
    default = member
    direct = _wrapped(member)
    if bound is _GLOBAL:

        def new_member(*args: Any, member: Any = default, **kwargs: Any) -> Any:
            kwargs.pop("_semantic", None)
            semantic = kwargs["_semantic"] = module.interpreter_semantic
            if direct is not None and member is default and semantic is not None:
                return direct(*args, **kwargs)
            return member(*args, **kwargs)

        return new_member

    def new_bound_member(*args: Any, member: Any = default, **kwargs: Any) -> Any:
        kwargs.pop("_semantic", None)
        kwargs["_semantic"] = bound
        if direct is not None and member is default and bound is not None:
            return direct(*args, **kwargs)
        return member(*args, **kwargs)

    return new_bound_member


def patch_attr(module: Any, semantic_is_global: bool) -> Callable[..., None]:
    """The interpreter's ``_patch_attr`` (module ``module``) with a cheaper wrapper around each builtin."""

    def _patch_attr(obj: Any, name: str, member: Any, builder: Any, scope: Any) -> None:
        bound = _GLOBAL if semantic_is_global else module.TritonSemantic(builder)
        scope.set_attr(obj, name, _member_wrapper(module, member, bound))

    return _patch_attr


def left_behind(
    namespaces: tuple[Any, ...], stock_code: Any, module: Any, semantic_is_global: bool
) -> list[tuple[Any, str, Any]]:
    """(namespace, name, cheaper wrapper) for each wrapper of Triton's own patching left in ``namespaces``.

    A run of the stock interpreter leaves some of its builtin wrappers in ``tl.core`` (it does not undo all of
    its patching); they are no builtins, so later patching keeps them, and code that names them runs them.
    Each is replaced, for the launch, by the wrapper ``patch_attr`` makes of the same member and semantic.
    """
    out = []
    for ns in namespaces:
        for name, value in list(vars(ns).items()):
            if getattr(value, "__code__", None) is not stock_code:
                continue
            member = (value.__kwdefaults__ or {}).get("member")
            if member is None:
                continue
            bound: Any = _GLOBAL
            if not semantic_is_global:
                cells = dict(zip(value.__code__.co_freevars, value.__closure__ or ()))
                if "semantic" not in cells:
                    continue
                bound = cells["semantic"].cell_contents
            out.append((ns, name, _member_wrapper(module, member, bound)))
    return out


class _Scope:
    """Stands in for the interpreter's patch scope: keeps what is set."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def set_attr(self, obj: Any, name: str, value: Any) -> None:
        self.values.append(value)


def _answer(*args: Any, _semantic: Any = None, **kwargs: Any) -> Any:
    return args, list(kwargs), kwargs, _semantic


def stock_member_code(original: Callable[..., Any], module: Any) -> Any:
    """The code object of the wrappers ``original`` (Triton's ``_patch_attr``) makes, or None."""
    scope = _Scope()
    try:
        original(
            object(),
            "probe",
            compat.tl.core.builtin(_answer),
            getattr(module, "interpreter_builder", None),
            scope,
        )
    except Exception:  # noqa: BLE001 - a Triton whose patching differs: nothing is recognised
        return None
    return getattr(scope.values[-1], "__code__", None) if scope.values else None


def patch_attr_matches(original: Callable[..., Any], fast: Callable[..., Any], module: Any) -> bool:
    """Whether the builtins ``fast`` patches pass what ``original``'s pass (arguments, keywords in order, a
    semantic of the same kind over the same builder): checked once before installing it."""

    probe: Any = compat.tl.core.builtin(_answer)
    builder = getattr(module, "interpreter_builder", None)
    answers = []
    try:
        for patch in (original, fast):
            scope = _Scope()
            patch(object(), "probe", probe, builder, scope)
            (member,) = scope.values
            answers.append([member(1, "a", key=2), member(3, _semantic="x", key=4, other=5)])
    except Exception:  # noqa: BLE001 - a Triton whose patching differs keeps its own
        return False
    for a, b in zip(*answers):
        if a[:3] != b[:3] or type(a[3]) is not type(b[3]):
            return False
        if getattr(a[3], "builder", None) is not getattr(b[3], "builder", None):
            return False
    return True


def tensor_init_matches(
    original: Callable[..., Any], fast: Callable[..., Any], tensor_cls: Any, ty: Any
) -> bool:
    """Whether ``fast`` builds the same attributes as ``original`` (names, order, values) for a tensor of ``ty``:
    checked once before installing it, so a Triton whose constructor does more keeps its own."""
    a, b, c = (tensor_cls.__new__(tensor_cls) for _ in range(3))
    original(a, None, ty)
    fast(b, None, ty)  # the first call runs the original and remembers its pieces
    fast(c, None, ty)  # this one is built from them
    for t in (b, c):
        if list(vars(t)) != list(vars(a)):
            return False
        if [repr(v) for v in t.shape.values] != [
            repr(v) for v in a.shape.values
        ] or t.shape.type != a.shape.type:
            return False
        if repr(t.numel) != repr(a.numel) or t.type is not a.type or t.dtype is not a.dtype:
            return False
    return True


# The replacements, made once, so the memoised answers outlive a launch (they depend on Triton's types only);
# ``interpreter._semantic_patches`` installs them for each launch.
FAST_NP_DTYPE = cached_np_dtype(compat.interpreter_module._get_np_dtype)
FAST_SANITIZE = sanitize_overflow(
    compat.TritonSemantic.binary_op_sanitize_overflow_impl, compat.TritonSemantic.device_assert
)
FAST_BLOCK_TY = cached_block_ty(compat.InterpreterBuilder.get_block_ty)
FAST_WITH_ELEMENT_TY = cached_with_element_ty(compat.tl.block_type.with_element_ty)
TENSOR = compat.tl.core.tensor
FAST_TENSOR_INIT = cached_tensor_init(TENSOR.__init__, _TL_TUPLE)
TENSOR_INIT_OK = tensor_init_matches(
    TENSOR.__init__, FAST_TENSOR_INIT, TENSOR, compat.tl.block_type(compat.tl.float32, [2, 4])
)
FAST_UNWRAP = fast_unwrap(compat.tl.core._unwrap_if_constexpr, compat.tl.core.constexpr, TENSOR)
FAST_PATCH_ATTR = patch_attr(compat.interpreter_module, compat.INTERPRETER_SEMANTIC_IS_GLOBAL)
PATCH_ATTR_OK = patch_attr_matches(
    compat.interpreter_module._patch_attr, FAST_PATCH_ATTR, compat.interpreter_module
)
STOCK_MEMBER_CODE = stock_member_code(compat.interpreter_module._patch_attr, compat.interpreter_module)


def fast_left_behind() -> list[tuple[Any, str, Any]]:
    """``left_behind`` over the ``tl`` namespaces of this Triton (nothing where the replacement is not used)."""
    if not PATCH_ATTR_OK or STOCK_MEMBER_CODE is None:
        return []
    module = compat.interpreter_module
    return left_behind(
        compat.LANG_NAMESPACES, STOCK_MEMBER_CODE, module, compat.INTERPRETER_SEMANTIC_IS_GLOBAL
    )


def lang_modules(fn: Any) -> set[int]:
    """Ids of the ``tl`` modules the interpreter's language patching patches for ``fn`` (those its globals
    name): the patching depends on nothing else of ``fn``, so a launch that patched them needs it no more."""
    return {id(v) for v in getattr(fn, "__globals__", {}).values() if v is compat.tl or v is compat.tl.core}


def replacements(type_checking: Any, broadcast: Any) -> list[tuple[Any, str, Any]]:
    """``(owner, name, value)`` of every front-end fast path this Triton takes, in install order (with
    ``fastbinary``'s two): ``tilelens.core.patches`` installs them for a launch and puts them back after;
    the guarded ones only where their check at import found them equal to Triton's."""
    module = compat.interpreter_module
    out: list[tuple[Any, str, Any]] = [
        (module, "_get_np_dtype", FAST_NP_DTYPE),
        (compat.TritonSemantic, "binary_op_sanitize_overflow_impl", FAST_SANITIZE),
        (compat.TritonSemantic, "binary_op_type_checking_impl", type_checking),
        (compat.TritonSemantic, "broadcast_impl_value", broadcast),
        (compat.InterpreterBuilder, "get_block_ty", FAST_BLOCK_TY),
        (compat.tl.block_type, "with_element_ty", FAST_WITH_ELEMENT_TY),
    ]
    if TENSOR_INIT_OK:
        out.append((TENSOR, "__init__", FAST_TENSOR_INIT))
    out.append((compat.tl.core, "_unwrap_if_constexpr", FAST_UNWRAP))
    if PATCH_ATTR_OK:
        out.append((module, "_patch_attr", FAST_PATCH_ATTR))
        out.extend(fast_left_behind())
    return out
