"""Kernels in the style of Triton's tutorials (written for TileLens's compatibility tests, not copied).

They exercise what real kernels use and the stock interpreter gets wrong or lacks: a float scalar
parameter used as a tensor, bf16 ``tl.dot``, libdevice, Philox random numbers, an atomic_cas spin lock.
Decorated in compiled mode (see tests/kernels.py for why).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton import knobs
from triton.language.extra import libdevice

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def fused_softmax(out_ptr, x_ptr, row_stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        tl.store(out_ptr + row * row_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)

    @triton.jit
    def layer_norm_fwd(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        diff = tl.where(mask, x - mean, 0.0)
        rstd = libdevice.rsqrt(tl.sum(diff * diff, axis=0) / n_cols + eps.to(tl.float32))
        w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, diff * rstd * w + b, mask=mask)
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)

    @triton.jit
    def layer_norm_bwd(
        dy_ptr,
        x_ptr,
        w_ptr,
        mean_ptr,
        rstd_ptr,
        dx_ptr,
        dw_ptr,
        db_ptr,
        lock_ptr,
        n_cols,
        BLOCK: tl.constexpr,
    ):
        # dw/db of all rows go into one buffer guarded by a spin lock (atomic_cas / atomic_xchg).
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        wdy = tl.where(mask, w * dy, 0.0)
        c1 = tl.sum(xhat * wdy, axis=0) / n_cols
        c2 = tl.sum(wdy, axis=0) / n_cols
        tl.store(dx_ptr + row * n_cols + cols, (wdy - (xhat * c1 + c2)) * rstd, mask=mask)
        while tl.atomic_cas(lock_ptr, 0, 1) == 1:
            pass
        tl.store(dw_ptr + cols, tl.load(dw_ptr + cols, mask=mask) + dy * xhat, mask=mask)
        tl.store(db_ptr + cols, tl.load(db_ptr + cols, mask=mask) + dy, mask=mask)
        tl.atomic_xchg(lock_ptr, 0)

    @triton.jit
    def seeded_dropout(x_ptr, out_ptr, n, p, seed, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        keep = tl.rand(seed, offs) > p
        tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)

    @triton.autotune(
        configs=[
            triton.Config({"BM": 32, "BN": 32, "BK": 32, "GROUP": 2}, num_warps=4),
            triton.Config({"BM": 16, "BN": 32, "BK": 16, "GROUP": 1}, num_warps=2),
        ],
        key=["M", "N", "K"],
    )
    @triton.jit
    def matmul_leaky_relu(a_ptr, b_ptr, c_ptr, M, N, K, slope, BM: tl.constexpr, BN: tl.constexpr,
                          BK: tl.constexpr, GROUP: tl.constexpr):  # fmt: skip
        # Grouped program order, bf16 operands accumulated in fp32, a float slope parameter.
        pid = tl.program_id(0)
        grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        per_group = GROUP * grid_n
        first_m = (pid // per_group) * GROUP
        group_m = min(grid_m - first_m, GROUP)
        pid_m = first_m + (pid % per_group) % group_m
        pid_n = (pid % per_group) // group_m
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            kk = k * BK + rk
            a = tl.load(
                a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0
            )
            b = tl.load(
                b_ptr + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0
            )
            acc = tl.dot(a, b, acc)
        acc = tl.where(acc >= 0, acc, acc * slope.to(tl.float32))
        c = acc.to(tl.bfloat16)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], c, mask=(rm[:, None] < M) & (rn[None, :] < N))
