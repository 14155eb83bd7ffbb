"""Buggy kernels for the out-of-bounds tests, each with the bug named where it is, decorated in compiled mode.

Every kernel here, run by the stock interpreter, writes or reads outside its tensors; TileLens must keep each
one from touching memory no argument owns, record every out-of-bounds lane and replay the launch.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton import knobs

from tilelens.core import compat

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def tail_store(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)  # BUG: no mask, y is shorter than a block

    @triton.jit
    def shifted_copy(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs - 8)  # BUG: starts 8 elements before x and runs past its end
        tl.store(out_ptr + offs, v, mask=offs < 100)

    @triton.jit
    def tail_store_masked(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

    @triton.jit
    def transpose(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, WRONG_AXIS: tl.constexpr):
        # x is M x N, y is N x M: y[j, i] = x[i, j]
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
        if WRONG_AXIS:  # noqa: SIM108 (a constexpr branch in a Triton kernel)
            mask = (rm[:, None] < N) & (rn[None, :] < M)  # BUG: each bound checks the other axis
        else:
            mask = (rm[:, None] < M) & (rn[None, :] < N)
        tl.store(y_ptr + rn[None, :] * M + rm[:, None], x, mask=mask)

    @triton.jit
    def scatter(x_ptr, idx_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        idx = tl.load(idx_ptr + offs, mask=mask, other=0)
        tl.store(y_ptr + idx, tl.load(x_ptr + offs, mask=mask), mask=mask)  # BUG: idx never checked

    @triton.jit
    def gather(x_ptr, idx_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        idx = tl.load(idx_ptr + offs, mask=mask, other=0)
        tl.store(y_ptr + offs, tl.load(x_ptr + idx, mask=mask), mask=mask)  # BUG: idx never checked

    @triton.jit
    def histogram(idx_ptr, counts_ptr, old_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        idx = tl.load(idx_ptr + offs, mask=mask, other=0)
        old = tl.atomic_add(counts_ptr + idx, 1.0, mask=mask)  # BUG: idx never checked
        tl.store(old_ptr + offs, old, mask=mask)

    @triton.jit
    def claim(flags_ptr, old_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        zero, one = tl.zeros([BLOCK], dtype=tl.int32), tl.full([BLOCK], 1, dtype=tl.int32)
        # BUG: flags is shorter than a block (and atomic_cas takes no mask)
        old = tl.atomic_cas(flags_ptr + offs, zero, one)
        tl.store(old_ptr + offs, old)

    @triton.jit
    def descriptor_store(x_ptr, y_ptr, M, M_DESC, N, BM: tl.constexpr, BN: tl.constexpr):
        pid = tl.program_id(0)
        src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        # BUG: the output descriptor claims M_DESC rows, y has M
        dst = tl.make_tensor_descriptor(y_ptr, shape=[M_DESC, N], strides=[N, 1], block_shape=[BM, BN])
        dst.store([pid * BM, 0], src.load([pid * BM, 0]) + 1.0)

    @triton.jit
    def indexed_load(x_ptr, off_ptr, mask_ptr, out_ptr, BLOCK: tl.constexpr):
        lanes = tl.arange(0, BLOCK)
        offs = tl.load(off_ptr + lanes)
        mask = tl.load(mask_ptr + lanes) != 0
        tl.store(out_ptr + lanes, tl.load(x_ptr + offs, mask=mask, other=-1.0))

    @triton.jit
    def indexed_store(y_ptr, off_ptr, mask_ptr, val_ptr, BLOCK: tl.constexpr):
        lanes = tl.arange(0, BLOCK)
        offs = tl.load(off_ptr + lanes)
        mask = tl.load(mask_ptr + lanes) != 0
        tl.store(y_ptr + offs, tl.load(val_ptr + lanes), mask=mask)

    @triton.jit
    def indexed_atomic_add(y_ptr, off_ptr, mask_ptr, old_ptr, BLOCK: tl.constexpr):
        lanes = tl.arange(0, BLOCK)
        offs = tl.load(off_ptr + lanes)
        mask = tl.load(mask_ptr + lanes) != 0
        old = tl.atomic_add(y_ptr + offs, 1.0, mask=mask)
        tl.store(old_ptr + lanes, tl.where(mask, old, -1.0))

    @triton.jit
    def shift(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs + 1), mask=offs < n)  # BUG: the load reads x[n]

    if compat.HAS_BLOCK_POINTERS:

        @triton.jit
        def block_ptr_store(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
            pid = tl.program_id(0)
            src = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
            dst = tl.make_block_ptr(y_ptr, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
            tl.store(dst, tl.load(src, boundary_check=(0, 1)) + 1.0)  # BUG: no boundary_check on the store
