"""Kernels shared by the tests, decorated in compiled mode.

Decorating inside ``knobs.runtime.scope()`` with ``interpret = False`` gives real ``JITFunction`` objects even in
an xdist worker that also imported tests/unit/test_multithreading.py (which sets TRITON_INTERPRET=1), so the
tests exercise TileLens's launch-time switch rather than silently testing stock interpreter kernels.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton import knobs

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)

    @triton.jit
    def unmasked_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)  # BUG: no mask, reads past the end of x
        tl.store(out_ptr + offs, x, mask=offs < n)

    @triton.jit
    def _square(x):
        return x * x

    @triton.jit
    def row_sum_of_squares(x_ptr, out_ptr, N: tl.constexpr):
        row = tl.program_id(0)
        x = tl.load(x_ptr + row * N + tl.arange(0, N))
        tl.store(out_ptr + row, tl.sum(_square(x), axis=0))

    @triton.jit
    def histogram_kernel(idx_ptr, counts_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        idx = tl.load(idx_ptr + offs, mask=mask, other=0)
        tl.atomic_add(counts_ptr + idx, 1, mask=mask)

    @triton.jit
    def gather_kernel(src_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        idx = tl.load(idx_ptr + offs)
        tl.store(out_ptr + offs, tl.load(src_ptr + idx))

    @triton.jit
    def block_ptr_copy(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        pid = tl.program_id(0)
        src = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
        dst = tl.make_block_ptr(out_ptr, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
        tl.store(dst, tl.load(src, boundary_check=(0, 1)), boundary_check=(0, 1))

    @triton.jit
    def descriptor_copy(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
        pid = tl.program_id(0)
        src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        dst = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        dst.store([pid * BM, 0], src.load([pid * BM, 0]))

    @triton.jit
    def host_descriptor_copy(src_desc, dst_desc, BM: tl.constexpr):
        """Host-side TensorDescriptor arguments (triton.tools.tensor_descriptor)."""
        pid = tl.program_id(0)
        dst_desc.store([pid * BM, 0], src_desc.load([pid * BM, 0]))

    @triton.jit
    def failing_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(x_ptr + offs, x.not_a_method(), mask=offs < n)


def make_autotuned(cache_results: bool = False):
    """A fresh autotuned + heuristics kernel (autotuners keep state, so each test gets its own)."""
    with knobs.runtime.scope():
        knobs.runtime.interpret = False

        @triton.autotune(
            configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 64}, num_warps=2)],
            key=["n"],
            cache_results=cache_results,
        )
        @triton.heuristics(values={"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
        @triton.jit
        def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            if EVEN:  # noqa: SIM108 (a constexpr branch in a Triton kernel)
                x = tl.load(x_ptr + offs)
            else:
                x = tl.load(x_ptr + offs, mask=offs < n)
            tl.store(out_ptr + offs, x * 2.0, mask=offs < n)

        return scale_kernel


def autotuned_grid(n: int):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
