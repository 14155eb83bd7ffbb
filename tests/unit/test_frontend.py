"""The cheaper front-end internals (tilelens.core.engine.frontend) answer exactly as Triton's own functions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tilelens.core import compat
from tilelens.core.engine import frontend

tl = compat.tl
TensorHandle = compat.TensorHandle
original_np_dtype = compat.interpreter_module._get_np_dtype


def _types() -> list[object]:
    scalars = [tl.int1, tl.int8, tl.uint8, tl.int16, tl.uint16, tl.int32, tl.uint32, tl.int64, tl.uint64]
    scalars += [tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.float8e5, tl.float8e4nv]
    out: list[object] = list(scalars)
    out += [tl.pointer_type(t) for t in (tl.float32, tl.int8, tl.bfloat16)]
    out += [tl.block_type(t, [4, 8]) for t in scalars]
    out += [tl.block_type(tl.pointer_type(tl.float16), [16])]
    return out


def test_cached_np_dtype_answers_as_triton_every_time() -> None:
    fast = frontend.cached_np_dtype(original_np_dtype)
    for _ in range(2):  # the second round answers from the memo
        for ty in _types():
            assert fast(ty) == original_np_dtype(ty), ty
    # an element type and a pointer to it share no memo entry
    assert fast(tl.pointer_type(tl.int8)) == np.dtype(np.uint64) and fast(tl.int8) == np.dtype(np.int8)


def test_cached_np_dtype_raises_as_triton_and_memoises_no_error() -> None:
    fast = frontend.cached_np_dtype(original_np_dtype)
    for _ in range(2):
        with pytest.raises(KeyError):
            original_np_dtype(tl.void)
        with pytest.raises(KeyError):
            fast(tl.void)


def _scalar(value: int, ty: object, np_type: type) -> object:
    return tl.tensor(TensorHandle(np.array([value], dtype=np_type), ty), ty)


@pytest.fixture
def semantic() -> object:
    return compat.interpreter_module.interpreter_semantic


def test_sanitize_overflow_skipped_only_while_device_assert_ignores_it(semantic: object) -> None:
    stock = compat.TritonSemantic.binary_op_sanitize_overflow_impl
    fast = frontend.sanitize_overflow(stock, compat.TritonSemantic.device_assert)
    big = _scalar(2**30, tl.int32, np.int32)
    add = semantic.add  # type: ignore[attr-defined]
    # debug off (the interpreter's options): Triton computes the check and discards it; both return None
    assert not semantic.builder.options.debug  # type: ignore[attr-defined]
    assert stock(semantic, big, big, add) is None
    assert fast(semantic, big, big, add) is None
    # the argument checks still fail as Triton's do
    with pytest.raises(AssertionError):
        stock(semantic, big, _scalar(1, tl.int16, np.int16), add)
    with pytest.raises(AssertionError):
        fast(semantic, big, _scalar(1, tl.int16, np.int16), add)
    # debug on: Triton's own function runs, and reports the overflow
    builder = semantic.builder  # type: ignore[attr-defined]
    options = builder.options
    builder.options = dataclasses.replace(options, debug=True)
    try:
        with pytest.raises(AssertionError, match="overflow"):
            fast(semantic, big, big, add)
        assert fast(semantic, big, _scalar(1, tl.int32, np.int32), add) is None
    finally:
        builder.options = options


def test_block_types_are_shared_values_equal_to_tritons() -> None:
    builder = compat.interpreter_module.interpreter_builder
    stock_get = compat.InterpreterBuilder.get_block_ty
    stock_with = tl.block_type.with_element_ty
    get = frontend.cached_block_ty(stock_get)
    with_element = frontend.cached_with_element_ty(stock_with)
    for ty in (tl.float32, tl.int1, tl.bfloat16, tl.pointer_type(tl.float16)):
        for shape in ([16], [4, 8], [1, 2, 64], tl.block_type(tl.int8, [2, 32]).shape):
            made = get(builder, ty, shape)
            assert made == stock_get(builder, ty, shape) and made.name == stock_get(builder, ty, shape).name
            assert get(builder, ty, shape) is made  # one instance per (element type, shape)
            other = with_element(made, tl.int64)
            assert other == stock_with(made, tl.int64) and type(other) is type(stock_with(made, tl.int64))
            assert with_element(made, tl.int64) is other
            assert with_element(made, tl.int32) is not other
    # what Triton refuses is refused alike, and nothing of it is kept
    for _ in range(2):
        with pytest.raises(ValueError, match="power of 2"):
            stock_get(builder, tl.float32, [3])
        with pytest.raises(ValueError, match="power of 2"):
            get(builder, tl.float32, [3])
    # the container counts: where Triton refuses a builtin tuple, so does the memo after a list was seen
    tupled: list[bool] = []
    for fn in (stock_get, get):
        try:
            fn(builder, tl.float32, (4, 8))
            tupled.append(True)
        except AssertionError:
            tupled.append(False)
    assert tupled[0] == tupled[1]
    # shapes of anything but ints go to Triton's function every time
    odd = [tl.constexpr(4)]
    assert get(builder, tl.float32, odd) == stock_get(builder, tl.float32, odd)
    assert get(builder, tl.float32, odd) is not get(builder, tl.float32, odd)


def _attrs(t: object) -> list[tuple[str, str]]:
    out = []
    for name, value in vars(t).items():
        if name == "shape":
            out.append((name, f"{type(value).__name__}{[repr(v) for v in value.values]}"))
        else:
            out.append((name, repr(value)))
    return out


def test_tensors_built_from_remembered_shapes_equal_tritons() -> None:
    stock = tl.core.tensor.__init__
    fast = frontend.cached_tensor_init(stock, tl.core.tuple)
    types = [tl.float32, tl.int8, tl.block_type(tl.float32, [16]), tl.block_type(tl.int1, [4, 8])]
    types += [tl.block_type(tl.pointer_type(tl.float16), [2, 1, 64])]
    for ty in types:
        made = []
        for _ in range(3):  # the first call runs Triton's constructor; the others build from what it made
            t = tl.core.tensor.__new__(tl.core.tensor)
            fast(t, "handle", ty)
            made.append(t)
        expected = tl.core.tensor.__new__(tl.core.tensor)
        stock(expected, "handle", ty)
        for t in made:
            assert _attrs(t) == _attrs(expected)  # the same attributes, values and order
            assert t.type is ty and t.dtype is ty.scalar and t.handle == "handle"
            assert t.shape.type == expected.shape.type and str(t.shape.type) == str(expected.shape.type)
        # each tensor has its own shape tuple and list: changing one leaves the others alone
        assert made[1].shape is not made[2].shape and made[1].shape.values is not made[2].shape.values
        made[1].shape.values.append(tl.constexpr(7))
        assert _attrs(made[2]) == _attrs(expected)
    # an equal type that is another object gets its own entry, built by Triton's constructor first
    again = tl.block_type(tl.float32, [16])
    t = tl.core.tensor.__new__(tl.core.tensor)
    fast(t, None, again)
    assert t.type is again and [repr(v) for v in t.shape.values] == ["constexpr[16]"]


def test_a_constructor_that_does_more_keeps_tritons() -> None:
    stock = tl.core.tensor.__init__

    def richer(self: object, handle: object, ty: object) -> None:
        stock(self, handle, ty)
        self.extra = 1  # type: ignore[attr-defined]

    ty = tl.block_type(tl.float32, [2, 4])
    assert frontend.tensor_init_matches(
        stock, frontend.cached_tensor_init(stock, tl.core.tuple), tl.core.tensor, ty
    )
    assert not frontend.tensor_init_matches(
        richer, frontend.cached_tensor_init(stock, tl.core.tuple), tl.core.tensor, ty
    )
    assert frontend.TENSOR_INIT_OK  # this Triton's constructor is the one the replacement reproduces


class _Scope:
    """Stands in for the interpreter's patch scope: keeps what ``_patch_attr`` sets."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def set_attr(self, obj: object, name: str, value: object) -> None:
        self.values[name] = value


def _patched(patch: object, member: object) -> object:
    scope = _Scope()
    builder = compat.interpreter_module.interpreter_builder
    patch(object(), "probe", member, builder, scope)  # type: ignore[operator]
    return scope.values["probe"]


def _probe(*args: object, _semantic: object = None, **kwargs: object) -> object:
    return (
        args,
        list(kwargs.items()),
        type(_semantic).__name__,
        getattr(_semantic, "builder", None),
        _semantic,
    )


def test_builtins_patched_cheaper_get_what_tritons_patching_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    module = compat.interpreter_module
    stock = module._patch_attr
    assert frontend.PATCH_ATTR_OK  # this Triton's patching is the one the replacement reproduces
    probe = tl.core.builtin(_probe)
    slow, fast = _patched(stock, probe), _patched(frontend.FAST_PATCH_ATTR, probe)
    calls = [((1, "a"), {"key": 2}), ((), {"_semantic": "mine", "key": 4, "other": 5}), ((tl.float32,), {})]
    for args, kwargs in calls:
        got, expected = fast(*args, **kwargs), slow(*args, **kwargs)  # type: ignore[operator]
        assert got[:4] == expected[:4] and got[2] == "TritonSemantic"
        # one semantic throughout (3.7 on), or one bound per patched builtin as Triton's patching binds (3.6)
        assert (got[4] is expected[4]) == compat.INTERPRETER_SEMANTIC_IS_GLOBAL
    # the lambda's own ``member`` keyword (a Triton quirk) calls what it names, in both
    other = tl.core.builtin(lambda *args, _semantic=None: ("other", args))
    assert fast(1, member=other) == slow(1, member=other) == ("other", (1,))  # type: ignore[operator]
    # a member that is not exactly a ``@builtin`` wrapper is called as it is
    plain = _patched(frontend.FAST_PATCH_ATTR, _probe)
    assert plain(7)[:4] == _patched(stock, _probe)(7)[:4]  # type: ignore[operator]
    if compat.INTERPRETER_SEMANTIC_IS_GLOBAL:
        # no semantic: the wrapper's check refuses the call in both (the direct path is not taken)
        monkeypatch.setattr(module, "interpreter_semantic", None)
        for member in (fast, slow):
            with pytest.raises(ValueError, match="triton.jit"):
                member(1)  # type: ignore[operator]


def test_patching_that_passes_other_arguments_keeps_tritons() -> None:
    module = compat.interpreter_module

    def dropping(obj: object, name: str, member: object, builder: object, scope: _Scope) -> None:
        scope.set_attr(
            obj, name, lambda *args, **kwargs: member(*args, _semantic=compat.TritonSemantic(builder))
        )  # type: ignore[operator]

    assert frontend.patch_attr_matches(module._patch_attr, frontend.FAST_PATCH_ATTR, module)
    assert not frontend.patch_attr_matches(module._patch_attr, dropping, module)


def test_wrappers_the_stock_interpreter_left_behind_are_found_and_equal() -> None:
    module = compat.interpreter_module
    stock = module._patch_attr
    assert frontend.STOCK_MEMBER_CODE is not None
    probe = tl.core.builtin(_probe)
    ns = type("Namespace", (), {})
    left = _patched(stock, probe)
    ns.left = left  # type: ignore[attr-defined]  # what a stock run leaves behind
    ns.own = probe  # type: ignore[attr-defined]  # a builtin: the interpreter patches it itself
    ns.other = lambda *a: a  # type: ignore[attr-defined]
    found = frontend.left_behind(
        (ns,), frontend.STOCK_MEMBER_CODE, module, compat.INTERPRETER_SEMANTIC_IS_GLOBAL
    )
    assert [(owner, name) for owner, name, _ in found] == [(ns, "left")]
    fast = found[0][2]
    assert fast is not left
    for args, kwargs in [((1, "a"), {"key": 2}), ((), {"_semantic": "mine", "other": 5})]:
        assert fast(*args, **kwargs) == left(*args, **kwargs)  # type: ignore[operator]
    assert fast()[4] is left()[4]  # type: ignore[operator, index]  # the very semantic (3.6: the one it bound)


def test_unwrap_answers_as_tritons_for_every_kind_of_value() -> None:
    stock = tl.core._unwrap_if_constexpr
    fast = frontend.fast_unwrap(stock, tl.core.constexpr, tl.core.tensor)
    t = tl.core.tensor(TensorHandle(np.array([1], dtype=np.int32), tl.int32), tl.int32)
    values: list[object] = [tl.constexpr(3), tl.constexpr(None), tl.constexpr(tl.float32), t, 1, 2.5, True]
    values += ["s", None, np.int32(4), [tl.constexpr(1), 2], (tl.constexpr(1), t), tl.float32]
    values += [tl.core.tuple([tl.constexpr(2), 3])]
    for value in values:
        got, expected = fast(value), stock(value)
        assert type(got) is type(expected) and repr(got) == repr(expected), value
        if not isinstance(value, (list, tuple, tl.core.tuple)):
            assert got is expected  # the very object (a constexpr's value, or the value itself)
