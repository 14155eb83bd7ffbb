"""The remembered binary-operator type checks (tilelens.core.engine.fastbinary) answer exactly as Triton's own."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from tilelens.core import compat
from tilelens.core.engine import fastbinary

tl = compat.tl
TensorHandle = compat.TensorHandle
Semantic = compat.TritonSemantic
STOCK_CHECK = Semantic.binary_op_type_checking_impl
STOCK_BROADCAST = Semantic.broadcast_impl_value

_SCALARS = [tl.int1, tl.int8, tl.uint8, tl.int32, tl.uint32, tl.int64, tl.uint64]
_SCALARS += [tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.float8e5]
_FLAGS = [  # allow_lhs_ptr, allow_rhs_ptr, arithmetic_check, div_or_mod
    (False, False, True, False),
    (True, True, True, False),
    (True, False, True, False),
    (False, False, False, False),
    (False, False, True, True),
]
NUMBERS: list[Any] = [0, 3, -2, 2**31, 2**32 + 5, -(2**40), 2**63 + 1, 2**64 + 1, 0.0, 2.5, -1e300]
NUMBERS += [math.nan, math.inf, True, np.float32(1.5)]


def _tensor(ty: Any) -> Any:
    scalar = ty.scalar
    np_type = compat.interpreter_module._get_np_dtype(scalar)
    shape = tuple(ty.shape) if ty.is_block() else (1,)
    data = (np.arange(math.prod(shape)) % 3 + 1).astype(np_type).reshape(shape)
    return tl.core.tensor(TensorHandle(data, scalar), ty)


def _operands() -> list[Any]:
    types: list[Any] = [tl.int1, tl.int32, tl.uint32, tl.int64, tl.float16, tl.bfloat16, tl.float32]
    types += [tl.float64, tl.float8e5, tl.pointer_type(tl.float32), tl.pointer_type(tl.int8)]
    shared = tl.block_type(tl.float32, [2, 4])
    types += [shared, shared, tl.block_type(tl.float32, [2, 4])]  # one type object twice, and an equal one
    types += [tl.block_type(t, [2, 4]) for t in (tl.int32, tl.uint8, tl.float16, tl.bfloat16, tl.int1)]
    types += [tl.block_type(tl.int32, s) for s in ([4], [1, 4], [2, 1], [8], [2, 2, 4])]
    types += [
        tl.block_type(tl.pointer_type(tl.float32), [2, 4]),
        tl.block_type(tl.pointer_type(tl.int8), [4]),
    ]
    return [_tensor(ty) for ty in types]


def _describe(value: Any) -> Any:
    if not isinstance(value, tl.core.tensor):
        return ("value", repr(value))
    data = np.asarray(value.handle.data)
    return (str(value.type), type(value.type).__name__, str(value.handle.dtype), data.dtype.str, data.shape)


def _identity(value: Any, operands: tuple[Any, ...]) -> list[int]:
    return [i for i, o in enumerate(operands) if o is value]


def _outcome(fn: Any, semantic: Any, *args: Any) -> Any:
    try:
        out = fn(semantic, *args)
    except Exception as e:  # noqa: BLE001 - what is raised is part of the answer
        return ("raised", type(e).__name__, str(e))
    return [(_describe(v), _identity(v, args[:2]), np.asarray(v.handle.data).tobytes()) for v in out]


def _cases() -> list[tuple[Any, ...]]:
    tensors = _operands()
    cases: list[tuple[Any, ...]] = []
    for lhs, rhs in itertools.product(tensors, tensors):
        cases += [(lhs, rhs, *flags) for flags in _FLAGS]
    for t, x in itertools.product(tensors, NUMBERS):
        for flags in _FLAGS:
            cases += [(t, x, *flags), (x, t, *flags)]
    return cases


@pytest.fixture(scope="module")
def semantic() -> Any:
    return Semantic(compat.interpreter_module.interpreter_builder)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # Triton's own casts of inf and nan, both ways alike
def test_type_checks_answer_as_triton_from_the_memo_too(semantic: Any, monkeypatch: Any) -> None:
    cases = _cases()
    expected = [_outcome(STOCK_CHECK, semantic, *case) for case in cases]
    assert sum(1 for e in expected if e[0] == "raised") > 100  # the cases include many Triton refuses
    fast = fastbinary.type_checking(STOCK_CHECK)
    for _ in range(2):  # the first round fills the memos, the second answers from them
        got = [_outcome(fast, semantic, *case) for case in cases]
        assert got == expected
    # with the remembered broadcast underneath too, as a launch installs them
    monkeypatch.setattr(Semantic, "broadcast_impl_value", fastbinary.broadcasting(STOCK_BROADCAST))
    for _ in range(2):
        assert [_outcome(fast, semantic, *case) for case in cases] == expected


def test_broadcasts_answer_as_triton_from_the_memo_too(semantic: Any) -> None:
    tensors = _operands()
    pairs = list(itertools.product(tensors, tensors))
    expected = [_outcome(STOCK_BROADCAST, semantic, lhs, rhs) for lhs, rhs in pairs]
    fast = fastbinary.broadcasting(STOCK_BROADCAST)
    for _ in range(2):
        assert [_outcome(fast, semantic, lhs, rhs) for lhs, rhs in pairs] == expected
    # same-shaped operands come back as they are, splats are new tensors of the block's shape
    block, other = tensors[11], tensors[13]
    assert fast(semantic, block, other) == (block, other)
    scalar = tensors[2]
    lhs, rhs = fast(semantic, block, scalar)
    assert lhs is block and rhs.type == tl.block_type(tl.uint32, [2, 4]) and rhs.handle.data.shape == (2, 4)


def test_a_semantic_subclass_gets_tritons_functions(semantic: Any) -> None:
    class Other(Semantic):  # type: ignore[misc, valid-type]
        calls = 0

        def computation_type_impl(self, *args: Any) -> Any:
            Other.calls += 1
            return Semantic.computation_type_impl(self, *args)

    other = Other(semantic.builder)
    fast = fastbinary.type_checking(STOCK_CHECK)
    a = _tensor(tl.block_type(tl.float32, [4]))
    for _ in range(3):
        fast(other, a, a)
    assert Other.calls == 3  # nothing remembered: Triton's function asked every time
    calls_before = Other.calls
    for _ in range(3):
        fast(semantic, a, a)
    assert Other.calls == calls_before


def test_an_error_is_not_remembered(semantic: Any) -> None:
    fast = fastbinary.type_checking(STOCK_CHECK)
    ptr, value = _tensor(tl.pointer_type(tl.float32)), _tensor(tl.float32)
    for _ in range(2):
        with pytest.raises(Exception) as stock_error:
            STOCK_CHECK(semantic, ptr, value)
        with pytest.raises(type(stock_error.value)) as fast_error:
            fast(semantic, ptr, value)
        assert str(fast_error.value) == str(stock_error.value)
    # the same types with pointers allowed pass, though the refusal came first
    out = fast(semantic, ptr, _tensor(tl.int32), True, True)
    assert out[0] is ptr and out[1].type == tl.int32
    # an out-of-range scalar is refused every time, an in-range one of the same type passes
    small = _tensor(tl.int8)
    for _ in range(2):
        with pytest.raises(ValueError, match="out of range"):
            fast(semantic, small, 300)
        assert fast(semantic, small, 100)[1].handle.data.tolist() == [100]


def test_flags_that_are_no_bools_go_to_triton(semantic: Any) -> None:
    fast = fastbinary.type_checking(STOCK_CHECK)
    ptr, offset = _tensor(tl.pointer_type(tl.float32)), _tensor(tl.int32)
    for flags in [([], [], True, False), ([1], [], True, False), (False, False, True, {})]:
        for lhs, rhs in [(ptr, offset), (offset, offset), (offset, 3)]:
            assert _outcome(fast, semantic, lhs, rhs, *flags) == _outcome(
                STOCK_CHECK, semantic, lhs, rhs, *flags
            )
