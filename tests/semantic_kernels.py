"""Tiny kernels that each hit one gap between Triton's stock interpreter and compiled Triton.

Decorated in compiled mode (see tests/kernels.py for why), and kept free of ``@triton.jit`` helpers such as
``tl.sum`` where a test also runs them through the stock interpreter in-process: helpers decorated in
compiled mode only run inside TileLens's launches or a process started with ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton import knobs
from triton.language.extra import libdevice
from triton.language.extra.cuda import libdevice as cuda_libdevice
from triton.language.extra.libdevice import tanh

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def float_param_to(x_ptr, out_ptr, scale, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * scale.to(tl.float32))

    @triton.jit
    def float_param_times_half(x_ptr, out_ptr, scale, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * scale)  # fp16 * fp32 scalar: fp32 when compiled

    @triton.jit
    def wide_int_param(out_ptr, n):
        tl.store(out_ptr, n + n)

    @triton.jit
    def bool_param(out_ptr, flag, n):
        if flag:
            tl.store(out_ptr, n + 1)
        else:
            tl.store(out_ptr, n - 1)

    @triton.jit
    def bf16_constants(x_ptr, out_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2.0 + 1.5)

    @triton.jit
    def bf16_elementwise(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        y = tl.load(y_ptr + offs)
        tl.store(out_ptr + offs, x + y)
        tl.store(out_ptr + N + offs, x * y)
        tl.store(out_ptr + 2 * N + offs, tl.maximum(x, y))
        tl.store(out_ptr + 3 * N + offs, -x)
        tl.store(out_ptr + 4 * N + offs, tl.where(x < y, x, y))

    @triton.jit
    def store_as_bf16(x_ptr, out_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))  # fp32 -> bf16 on store

    @triton.jit
    def bf16_dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        a = tl.load(a_ptr + i[:, None] * N + i[None, :])
        b = tl.load(b_ptr + i[:, None] * N + i[None, :])
        tl.store(c_ptr + i[:, None] * N + i[None, :], tl.dot(a, b))

    @triton.jit
    def bf16_reductions(x_ptr, out_ptr, idx_ptr, cum_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        tl.store(out_ptr, tl.sum(x, 0))
        tl.store(out_ptr + 1, tl.max(x, 0))
        tl.store(out_ptr + 2, tl.min(x, 0))
        tl.store(idx_ptr, tl.argmax(x, 0))
        tl.store(cum_ptr + offs, tl.cumsum(x, 0))

    @triton.jit
    def atomic_add_pairs(x_ptr, out_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.atomic_add(out_ptr + offs % 2, tl.load(x_ptr + offs))

    @triton.jit
    def scalar_and_block_masks(x_ptr, out_ptr, total_ptr, rows, n, N: tl.constexpr):
        # ``row < rows`` is a scalar comparison: splatted, the interpreter gives it int32 data, so each mask
        # below is an int32 array (which Triton 3.9's C++ loads, stores and atomics refuse).
        row = tl.program_id(0)
        offs = tl.arange(0, N)
        mask = (offs < n) & (row < rows)
        x = tl.load(x_ptr + row * n + offs, mask=mask, other=0.0)
        tl.store(out_ptr + row * n + offs, x * 2.0, mask=mask)
        tl.atomic_add(total_ptr + offs, x, mask=mask)

    @triton.jit
    def libdevice_calls(x_ptr, out_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        tl.store(out_ptr + offs, tanh(x))  # a stub imported by name
        tl.store(out_ptr + N + offs, libdevice.rsqrt(x + 1.0))  # through the stubs module
        tl.store(out_ptr + 2 * N + offs, cuda_libdevice.exp(x))  # the CUDA backend's function itself

    @triton.jit
    def inline_asm_kernel(x_ptr, out_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
        tl.store(out_ptr + offs, y)

    @triton.jit
    def unsupported_libdevice(x_ptr, out_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(out_ptr + offs, libdevice.j0(tl.load(x_ptr + offs)))

    @triton.jit
    def mixed_working_kernel(x_ptr, h_ptr, i_ptr, out_ptr, hout_ptr, iout_ptr, n, N: tl.constexpr):
        # Already correct in the stock interpreter: fp32, fp16 and int arithmetic with Python constants,
        # small int parameters, masks, where, reductions. TileLens must leave every bit of it unchanged.
        offs = tl.arange(0, N)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        h = tl.load(h_ptr + offs, mask=mask, other=0.0)
        i = tl.load(i_ptr + offs, mask=mask, other=0)
        y = tl.where(x > 0.25, x * 1.7 - 0.3, tl.exp(x) / 3.0)
        tl.store(out_ptr + offs, y + tl.sum(x, 0) / n, mask=mask)
        tl.store(hout_ptr + offs, h * 0.125 + h * h - 1.5, mask=mask)
        tl.store(iout_ptr + offs, (i * 7 + n) // 3 - tl.max(i, 0), mask=mask)
