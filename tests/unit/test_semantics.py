"""Each semantic fix: a tiny kernel the stock interpreter fails or miscomputes, and what TileLens computes.

"Stock" runs go through an ``InterpretedFunction`` outside any TileLens launch, exactly as Triton ships it;
that they still fail after a TileLens launch also shows the fixes are removed when a launch ends.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests import semantic_kernels as sk
from tilelens.core import compat
from tilelens.core.engine import semantics
from tilelens.core.interpreted.trace import TritonTrace
from tilelens.core.patches import _Patcher, make_interpreted

ROOT = Path(__file__).resolve().parents[2]


def stock(kernel, *args, **kwargs):
    return make_interpreted(kernel.fn).run(*args, grid=(1,), warmup=False, **kwargs)


def recorded(kernel, *args, **kwargs):
    traced = TritonTrace(kernel, in_place=False)
    try:
        traced[(1,)](*args, **kwargs)
    finally:
        record = traced.records[-1]
    return record


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


# ----------------------------------------------------------------------------------------- scalar parameters


def test_float_parameter_is_an_fp32_scalar():
    x, out = torch.randn(16), torch.empty(16)
    with pytest.raises(compat.InterpreterError, match="'float' object has no attribute 'to'"):
        stock(sk.float_param_to, x, out, 0.3, N=16)
    rec = recorded(sk.float_param_to, x, out, 0.3, N=16)
    assert rec.status == "ok"
    assert torch.equal(out, x * torch.tensor(0.3, dtype=torch.float32))
    with pytest.raises(compat.InterpreterError):  # the fix is gone once the launch ended
        stock(sk.float_param_to, x, out, 0.3, N=16)


def test_float_parameter_promotes_half_operands_to_fp32_like_compiled_triton():
    x = torch.randn(64, dtype=torch.float16)
    out = torch.empty(64)
    stock(sk.float_param_times_half, x, out, 0.1, N=64)
    half_product = out.clone()  # the stock interpreter multiplied in fp16 (a Python float is weakly typed)
    rec = recorded(sk.float_param_times_half, x, out, 0.1, N=64)
    assert rec.status == "ok"
    expected = x.float() * torch.tensor(0.1, dtype=torch.float32)
    assert torch.equal(out, expected)
    assert not torch.equal(half_product, expected)


def test_int_parameter_between_2_31_and_2_63_is_i64():
    n = 2**31 + 5
    out = torch.zeros(1, dtype=torch.int64)
    stock(sk.wide_int_param, out, n)
    assert out.item() == 10  # stored as uint32, the sum wrapped around
    rec = recorded(sk.wide_int_param, out, n)
    assert rec.status == "ok" and out.item() == 2 * n


def test_bool_parameter_is_i1():
    out = torch.zeros(1, dtype=torch.int32)
    try:
        stock(sk.bool_param, out, True, 5)
    except ValueError as exc:  # raised while converting arguments, before the interpreter wraps errors
        assert "exceeds dtype primitive_bitwidth" in str(exc)  # Triton 3.6: int32 data under an i1 type
    for flag, expected in ((True, 6), (False, 4)):
        assert recorded(sk.bool_param, out, flag, 5).status == "ok"
        assert out.item() == expected


# ----------------------------------------------------------------------------------------------------- masks


def test_masks_from_a_scalar_comparison_are_read_as_bool():
    rows, n = 3, 20
    x = torch.randn(rows, n)
    out, total = torch.zeros(rows, n), torch.zeros(32)
    if compat.MASKS_MUST_BE_BOOL:
        with pytest.raises(compat.InterpreterError, match="mask has unsupported dtype"):
            stock(sk.scalar_and_block_masks, x, out, total, rows, n, N=32)
    else:  # 3.6 to 3.8 read the int32 mask as nonzero = active
        stock(sk.scalar_and_block_masks, x, out, total, rows, n, N=32)
        assert torch.equal(out[0], x[0] * 2.0)
    traced = TritonTrace(sk.scalar_and_block_masks, in_place=False)
    for grid in ((rows,), (rows + 1,)):  # batched; the last program's row is masked off
        out.zero_()
        total.zero_()
        traced[grid](x, out, total, rows, n, N=32)
        rec = traced.records[-1]
        assert rec.status == "ok" and rec.config["engine"] == {"mode": "batched"}
        assert torch.equal(out, x * 2.0)
        assert torch.allclose(total[:n], x.sum(0)) and not total[n:].any()
        assert rec.summary.load_lanes == rec.summary.store_lanes == rec.summary.atomic_lanes == rows * n


# ---------------------------------------------------------------------------------------------------- bf16


def test_bf16_arithmetic_with_python_constants():
    x = torch.randn(32, dtype=torch.bfloat16)
    out = torch.empty(32, dtype=torch.bfloat16)
    expected = x * 2.0 + 1.5  # torch rounds every bf16 op to nearest even too
    try:
        stock(sk.bf16_constants, x, out, N=32)
    except compat.InterpreterError as exc:
        assert "get_bf16" in str(exc)  # Triton 3.6 and 3.8 cannot make the constant
    else:
        assert not torch.equal(bits(out), bits(expected))  # 3.9 makes it, then adds the raw bits
    assert recorded(sk.bf16_constants, x, out, N=32).status == "ok"
    assert torch.equal(bits(out), bits(expected))


def test_bf16_elementwise_ops_compute_values_not_bit_patterns():
    torch.manual_seed(1)
    x, y = torch.randn(32, dtype=torch.bfloat16), torch.randn(32, dtype=torch.bfloat16)
    out = torch.empty(5 * 32, dtype=torch.bfloat16)
    expected = torch.cat([x + y, x * y, torch.maximum(x, y), -x, torch.where(x < y, x, y)])
    stock(sk.bf16_elementwise, x, y, out, N=32)
    assert not torch.equal(bits(out[:32]), bits(x + y))  # integer addition of the raw bits
    assert recorded(sk.bf16_elementwise, x, y, out, N=32).status == "ok"
    assert torch.equal(bits(out), bits(expected))


def test_fp32_to_bf16_rounds_to_nearest_even():
    ties = [1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8)]  # exactly halfway: to even
    above = [1.0 + 2**-8 + 2**-20, 3.0e38]  # above halfway: up (the last one overflows to inf)
    specials = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-40]
    x = torch.tensor(ties + above + specials + torch.randn(21).tolist(), dtype=torch.float32)
    out = torch.empty(32, dtype=torch.bfloat16)
    stock(sk.store_as_bf16, x, out, N=32)
    assert not torch.equal(bits(out), bits(x.to(torch.bfloat16)))  # the interpreter truncates
    assert recorded(sk.store_as_bf16, x, out, N=32).status == "ok"
    nan = x.isnan()
    assert torch.equal(bits(out[~nan]), bits(x[~nan].to(torch.bfloat16)))
    assert out[nan].isnan().all()  # NaN payloads are unspecified: the GPU returns 0x7FFF, torch others


def test_to_bf16_from_fp64_rounds_once():
    # 1 + 2**-8 + 2**-40 is above the bf16 halfway point, but rounds to the fp32 halfway point first.
    values = np.array([1.0 + 2**-8 + 2**-40, -(1.0 + 2**-8 + 2**-40), 1.0 + 2**-8, 2.0**130, -(2.0**-140)])
    got = semantics.to_bf16(values)
    expected = [0x3F81, 0xBF81, 0x3F80, 0x7F80, 0x8000]
    assert got.tolist() == expected


def test_bf16_dot_accumulates_in_fp32():
    torch.manual_seed(2)
    a, b = torch.randn(16, 16, dtype=torch.bfloat16), torch.randn(16, 16, dtype=torch.bfloat16)
    c = torch.empty(16, 16)
    stock(sk.bf16_dot, a, b, c, N=16)
    assert not torch.allclose(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)  # a product of the raw bits
    assert recorded(sk.bf16_dot, a, b, c, N=16).status == "ok"
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-6, atol=1e-5)


def test_bf16_reductions_and_scans():
    torch.manual_seed(3)
    x = torch.randn(32, dtype=torch.bfloat16)
    out = torch.empty(3, dtype=torch.bfloat16)
    idx = torch.empty(1, dtype=torch.int32)
    cum = torch.empty(32, dtype=torch.bfloat16)
    assert recorded(sk.bf16_reductions, x, out, idx, cum, N=32).status == "ok"
    assert out[0] == x.float().sum().to(torch.bfloat16)
    assert out[1] == x.max() and out[2] == x.min() and idx.item() == x.float().argmax().item()
    assert torch.equal(bits(cum), bits(torch.cumsum(x.float(), 0).to(torch.bfloat16)))


def test_bf16_atomic_add():
    torch.manual_seed(4)
    x = torch.randn(16, dtype=torch.bfloat16)
    out = torch.zeros(2, dtype=torch.bfloat16)
    with pytest.raises(compat.InterpreterError, match="Unsupported data type"):
        stock(sk.atomic_add_pairs, x, out, N=16)
    assert recorded(sk.atomic_add_pairs, x, out, N=16).status == "ok"
    expected = torch.zeros(2, dtype=torch.bfloat16)
    for i in range(16):  # lane order, rounding after every add, as serialised hardware atomics do
        expected[i % 2] += x[i]
    assert torch.equal(bits(out), bits(expected))


# ----------------------------------------------------------------------------------------------- libdevice


def test_libdevice_stubs_and_backend_functions():
    x, out = torch.rand(16), torch.empty(3 * 16)
    with pytest.raises(compat.InterpreterError):
        stock(sk.libdevice_calls, x, out, N=16)
    assert recorded(sk.libdevice_calls, x, out, N=16).status == "ok"
    expected = torch.cat([torch.tanh(x), torch.rsqrt(x + 1.0), torch.exp(x)])
    torch.testing.assert_close(out, expected, rtol=2e-7, atol=0)


def test_libdevice_redirects_are_removed_after_the_launch():
    names = ("tanh", "libdevice", "cuda_libdevice")
    before = {name: vars(sk)[name] for name in names}
    recorded(sk.libdevice_calls, torch.rand(16), torch.empty(48), N=16)
    assert {name: vars(sk)[name] for name in names} == before
    assert sk.tanh.__module__ == compat.LIBDEVICE_STUB_MODULE


def test_cache_keys_are_unchanged_while_libdevice_is_redirected():
    # Another thread may compute a cache key while a launch has the redirects in place: Triton's dependency
    # walker must see them as it sees the stubs and modules they replace.
    registry = dict(compat.jit_registry or {})
    stub_tanh, stubs = sk.tanh, sk.libdevice

    def fresh_key():
        return compat.JITFunction(sk.libdevice_calls.fn).cache_key

    try:
        before = fresh_key()
        patcher = _Patcher()
        for name, value in semantics.libdevice_redirects(vars(sk)):
            patcher.set_item(vars(sk), name, value)
        assert vars(sk)["tanh"] is not stub_tanh and vars(sk)["libdevice"] is not stubs
        try:
            during = fresh_key()
        finally:
            patcher.restore()
    finally:
        if compat.jit_registry is not None:
            compat.jit_registry.clear()
            compat.jit_registry.update(registry)
    assert during == before


# ----------------------------------------------------------------------------------------------- failures


def _line_of(kernel, needle: str) -> int:
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if needle in line)


def test_inline_asm_is_recorded_with_the_construct_and_the_kernel_line():
    traced = TritonTrace(sk.inline_asm_kernel, in_place=False)
    with pytest.raises(compat.InterpreterError, match="inline_asm"):  # the user gets the interpreter's error
        traced[(1,)](torch.rand(8), torch.empty(8), N=8)
    (record,) = traced.records
    line = _line_of(sk.inline_asm_kernel, "inline_asm_elementwise(")
    assert record.status == "error"
    assert record.error.startswith(
        f"tl.inline_asm_elementwise is not supported by the interpreter (semantic_kernels.py:{line}: `y = tl."
    )
    assert "InterpreterError" not in record.error and "Traceback" not in record.error


def test_libdevice_function_without_an_equivalent_is_named():
    traced = TritonTrace(sk.unsupported_libdevice, in_place=False)
    with pytest.raises(compat.InterpreterError):
        traced[(1,)](torch.rand(8), torch.empty(8), N=8)
    line = _line_of(sk.unsupported_libdevice, "libdevice.j0")
    assert traced.records[-1].error == (
        "libdevice function __nv_j0f is not supported by the interpreter "
        f"(semantic_kernels.py:{line}: `tl.store(out_ptr + offs, libdevice.j0(tl.load(x_ptr + offs)))`)"
    )


def test_other_errors_name_the_underlying_error_and_line():
    from tests import kernels

    traced = TritonTrace(kernels.failing_kernel, in_place=False)
    with pytest.raises(compat.InterpreterError):
        traced[(1,)](torch.randn(8), 8, BLOCK=8)
    error = traced.records[-1].error
    assert error.startswith("AttributeError: 'tensor' object has no attribute 'not_a_method' (kernels.py:")
    assert error.endswith("`tl.store(x_ptr + offs, x.not_a_method(), mask=offs < n)`)")


# ------------------------------------------------------------------------------------------- transparency

STOCK_RUN = """
import hashlib, torch
from triton.runtime.interpreter import InterpretedFunction
from tests import semantic_kernels as sk
from tests.unit.test_semantics import mixed_inputs
args = mixed_inputs()
InterpretedFunction(sk.mixed_working_kernel.fn)[(1,)](*args, 100, N=128)
print(*(hashlib.sha256(a.numpy().tobytes()).hexdigest() for a in args[3:]))
"""


def mixed_inputs():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(128, generator=gen)
    h = torch.randn(128, generator=gen).half()
    i = torch.randint(-1000, 1000, (128,), generator=gen, dtype=torch.int32)
    return (
        x,
        h,
        i,
        torch.zeros(128),
        torch.zeros(128, dtype=torch.float16),
        torch.zeros(128, dtype=torch.int32),
    )


def test_kernels_the_stock_interpreter_runs_are_bit_identical():
    # The stock reference needs TRITON_INTERPRET=1 from import on (tl.sum, tl.max are helpers), so it runs
    # in its own process.
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    reference = subprocess.run(
        [sys.executable, "-c", STOCK_RUN], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    args = mixed_inputs()
    assert recorded(sk.mixed_working_kernel, *args, 100, N=128).status == "ok"
    assert [hashlib.sha256(a.numpy().tobytes()).hexdigest() for a in args[3:]] == reference
