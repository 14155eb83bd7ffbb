"""Kernels written here for the benchmark workloads (used when no real library kernel can be recorded).

Each mirrors the memory-access shape of the workload it stands for: tiled 2-D loads (gemm), a gather
(indirect_load), loops inside loops, block pointers advanced in a loop, and the row-wise reductions of the
Liger/FlagGems ops (JSD, layer norm, SwiGLU, cross entropy, fused linear JSD).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def gemm_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, OOB: tl.constexpr
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        if OOB:
            # the bug this workload stands for: the last tile reads one element past the end of b
            last = (pid_m == tl.num_programs(0) - 1) & (pid_n == tl.num_programs(1) - 1) & (k + BK >= K)
            b_offs = (k + rk)[:, None] * N + rn[None, :] + tl.where(last, 1, 0)
        else:
            b_offs = (k + rk)[:, None] * N + rn[None, :]
        b = tl.load(b_ptr + b_offs)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def indirect_load_kernel(src_ptr, idx_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    idx = tl.load(idx_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, tl.load(src_ptr + idx, mask=mask), mask=mask)


@triton.jit
def nested_loop_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BN,), dtype=tl.float32)
    for i in range(0, BM):
        row = pid * BM + i
        for j in range(0, N, BN):
            cols = j + tl.arange(0, BN)
            acc += tl.load(x_ptr + row * N + cols, mask=(cols < N) & (row < M), other=0.0)
    tl.store(out_ptr + pid * BN + tl.arange(0, BN), acc)


@triton.jit
def block_pointer_loop_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, N, BN):
        acc += tl.load(src, boundary_check=(0, 1), padding_option="zero")
        src = tl.advance(src, (0, BN))
    dst = tl.make_block_ptr(out_ptr, (M, BN), (BN, 1), (pid * BM, 0), (BM, BN), (1, 0))
    tl.store(dst, acc, boundary_check=(0, 1))


@triton.jit
def jsd_kernel(x_ptr, y_ptr, loss_ptr, n_cols, beta, BLOCK: tl.constexpr):
    """Generalised JSD on log-probabilities, one program per row (the computation of Liger's JSD forward)."""
    row = tl.program_id(0)
    loss = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.load(y_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
        q = tl.exp(x)
        p = tl.exp(y)
        m = beta * p + (1 - beta) * q
        log_m = tl.log(tl.where(mask, m, 1.0))
        term = beta * p * (y - log_m) + (1 - beta) * q * (x - log_m)
        loss += tl.where(mask, term, 0.0)
    tl.store(loss_ptr + row, tl.sum(loss, axis=0))


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    """Row-wise layer norm with two passes over the row (the shape of FlagGems' layer_norm)."""
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols
    var_acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
        d = tl.where(offs < n_cols, x - mean, 0.0)
        var_acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(var_acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + offs, mask=mask)
        b = tl.load(b_ptr + offs, mask=mask)
        tl.store(y_ptr + row * n_cols + offs, (x - mean) * rstd * w + b, mask=mask)


@triton.jit
def swiglu_kernel(a_ptr, b_ptr, c_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    a = tl.load(a_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + row * n_cols + offs, mask=mask, other=0.0)
    tl.store(c_ptr + row * n_cols + offs, a * tl.sigmoid(a) * b, mask=mask)


@triton.jit
def cross_entropy_kernel(logits_ptr, target_ptr, loss_ptr, n_cols, BLOCK: tl.constexpr):
    """Online-softmax cross entropy, one program per row (the computation of Liger's cross entropy forward)."""
    row = tl.program_id(0)
    target = tl.load(target_ptr + row)
    m = float("-inf")
    d = 0.0
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(logits_ptr + row * n_cols + offs, mask=offs < n_cols, other=float("-inf"))
        block_max = tl.max(x, axis=0)
        new_m = tl.maximum(m, block_max)
        d = d * tl.exp(m - new_m) + tl.sum(tl.exp(x - new_m), axis=0)
        m = new_m
    x_t = tl.load(logits_ptr + row * n_cols + target)
    tl.store(loss_ptr + row, tl.log(d) + m - x_t)


@triton.jit
def fused_linear_jsd_kernel(h_ptr, w_ptr, t_ptr, loss_ptr, H, V, beta, BH: tl.constexpr, BV: tl.constexpr):
    """Student logits = h @ W^T computed per row tile, then JSD against teacher log-probs (row-wise)."""
    row = tl.program_id(0)
    loss = tl.zeros((BV,), dtype=tl.float32)
    for v0 in range(0, V, BV):
        vs = v0 + tl.arange(0, BV)
        logits = tl.zeros((BV,), dtype=tl.float32)
        for h0 in range(0, H, BH):
            hs = h0 + tl.arange(0, BH)
            h = tl.load(h_ptr + row * H + hs)
            w = tl.load(w_ptr + vs[:, None] * H + hs[None, :])
            logits += tl.sum(w * h[None, :], axis=1)
        t = tl.load(t_ptr + row * V + vs)
        q = tl.exp(logits)
        p = tl.exp(t)
        m = beta * p + (1 - beta) * q
        loss += beta * p * (t - tl.log(m)) + (1 - beta) * q * (logits - tl.log(m))
    tl.store(loss_ptr + row, tl.sum(loss, axis=0))


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)
