"""Gluon kernels shared by the tests and scripts/gpu_gluon_check.py (written for Triton 3.6 through 3.9).

``gluon.jit`` always gives a compiled-mode ``GluonJITFunction`` (Gluon has no interpreter mode), so no knobs
scope is needed here. Builtins whose names moved between releases come from ``compat.gluon_api()``.
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia import blackwell
from triton.experimental.gluon.language.nvidia.blackwell import (
    TensorMemoryLayout,
    allocate_tensor_memory,
    tcgen05_commit,
    tcgen05_mma,
)
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma

from tilelens.core import compat

_api = compat.gluon_api()
cta_barrier = _api["cta_barrier"]
tma_load = _api["tma_load"]
tma_store = _api["tma_store"]
NEW_REINTERPRET = gl.constexpr(_api["reinterpret"] == "reinterpret")  # Triton 3.9 renamed _reinterpret
# Triton 3.6's tensor-memory load needs its register layout, from get_tmem_reg_layout (3.8 infers it).
get_tmem_reg_layout = getattr(blackwell, "get_tmem_reg_layout", None)
TMEM_LOAD_INFERS_LAYOUT = gl.constexpr(get_tmem_reg_layout is None)

BLOCKED_1D = gl.BlockedLayout([4], [32], [4], [0])
BLOCKED_2D = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
ROW_MAJOR_SHARED = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
FLAT_SHARED = gl.constexpr(gl.SwizzledSharedLayout(1, 1, 1, [0]))


@gluon.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: gl.constexpr, layout: gl.constexpr):
    pid = gl.program_id(0)
    offs = pid * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask, other=0.0)
    y = gl.load(y_ptr + offs, mask=mask)
    gl.store(out_ptr + offs, x + y, mask=mask)


@gluon.jit
def row_sum_through_shared(x_ptr, out_ptr, M, N: gl.constexpr, BM: gl.constexpr, layout: gl.constexpr):
    """Each program stages a [BM, N] tile in shared memory, reads it back by halves and sums its rows."""
    pid = gl.program_id(0)
    rows = pid * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, layout))
    row_ok = gl.expand_dims(rows < M, 1)
    x = gl.load(x_ptr + gl.expand_dims(rows, 1) * N + gl.expand_dims(cols, 0), mask=row_ok, other=0.0)
    smem = gl.allocate_shared_memory(gl.float32, [BM, N], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    smem.store(x)
    cta_barrier()
    half_layout: gl.constexpr = gl.BlockedLayout([1, 1], [8, 4], [4, 1], [1, 0])
    left = smem.slice(0, N // 2, dim=1).load(half_layout)
    right = smem.slice(N // 2, N // 2, dim=1).load(half_layout)
    total = gl.sum(left, axis=1) + gl.sum(right, axis=1)
    total = gl.convert_layout(total, gl.SliceLayout(1, layout))
    gl.store(out_ptr + rows, total, mask=rows < M)


@gluon.jit
def blocked_matmul(
    a_ptr, b_ptr, c_ptr, M, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, layout: gl.constexpr
):
    """C = A @ B with FMA dots: operands converted to dot-operand layouts, the result to a store layout."""
    pid_m = gl.program_id(0)
    pid_n = gl.program_id(1)
    rm = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    rn = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
    rk_col = gl.arange(0, BK, layout=gl.SliceLayout(0, layout))
    rk_row = gl.arange(0, BK, layout=gl.SliceLayout(1, layout))
    acc = gl.zeros([BM, BN], gl.float32, layout)
    for k in range(0, K, BK):
        a = gl.load(a_ptr + gl.expand_dims(rm, 1) * K + gl.expand_dims(k + rk_col, 0))
        b = gl.load(b_ptr + gl.expand_dims(k + rk_row, 1) * N + gl.expand_dims(rn, 0))
        a = gl.convert_layout(a, gl.DotOperandLayout(operand_index=0, parent=layout, k_width=0))
        b = gl.convert_layout(b, gl.DotOperandLayout(operand_index=1, parent=layout, k_width=0))
        acc = gl.dot_fma(a, b, acc)
    store_layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [4, 1], [1, 0])
    acc = gl.convert_layout(acc, store_layout)
    sm = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, store_layout))
    sn = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, store_layout))
    gl.store(c_ptr + gl.expand_dims(sm, 1) * N + gl.expand_dims(sn, 0), acc)


@gluon.jit
def shared_views(x_ptr, out_ptr, N: gl.constexpr, layout: gl.constexpr):
    """out = x.T through a permuted shared view, then row 0 of x's int32 bits via reinterpret and slice."""
    rows = gl.arange(0, N, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows, 1) * N + gl.expand_dims(cols, 0)
    smem = gl.allocate_shared_memory(gl.float32, [N, N], ROW_MAJOR_SHARED, gl.load(x_ptr + offs))
    t = smem.permute([1, 0]).load(layout)
    gl.store(out_ptr + offs, t)
    if NEW_REINTERPRET:
        flat = smem.reinterpret(gl.int32, [N * N], FLAT_SHARED)
    else:
        flat = smem._reinterpret(gl.int32, [N * N], FLAT_SHARED)
    bits = flat.slice(0, N).load(gl.SliceLayout(0, layout))
    gl.store(out_ptr + N * N + cols, bits.to(gl.float32, bitcast=True))


@gluon.jit
def tma_wgmma_matmul(a_desc, b_desc, c_desc, K, num_warps: gl.constexpr):
    """Hopper-style C = A @ B: TMA copies into shared memory, an mbarrier per step, wgmma, a TMA store."""
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    a_smem = gl.allocate_shared_memory(dtype, a_desc.block_type.shape, a_desc.layout)
    b_smem = gl.allocate_shared_memory(dtype, b_desc.block_type.shape, b_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 16]
    )
    acc = gl.zeros((BM, BN), dtype=gl.float32, layout=mma_layout)
    phase = 0
    for k in range(0, K, BK):
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        tma_load(a_desc, [off_m, k], bar, a_smem)
        tma_load(b_desc, [k, off_n], bar, b_smem)
        mbarrier.wait(bar, phase=phase)
        phase ^= 1
        acc = warpgroup_mma(a_smem, b_smem, acc)
    mbarrier.invalidate(bar)
    c_smem = gl.allocate_shared_memory(dtype, c_desc.block_type.shape, c_desc.layout)
    c_smem.store(acc.to(dtype))
    fence_async_shared()
    tma_store(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(0)


@gluon.jit
def tcgen05_matmul(
    a_ptr, b_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr, layout: gl.constexpr
):
    """Blackwell-style C = A @ B: operands staged in shared memory, the accumulator in tensor memory."""
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, layout))
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, layout))
    ka = gl.arange(0, K, layout=gl.SliceLayout(0, layout))
    kb = gl.arange(0, K, layout=gl.SliceLayout(1, layout))
    a = gl.load(a_ptr + gl.expand_dims(rm, 1) * K + gl.expand_dims(ka, 0))
    b = gl.load(b_ptr + gl.expand_dims(kb, 1) * N + gl.expand_dims(rn, 0))
    a_smem = gl.allocate_shared_memory(
        gl.float16, [M, K], gl.NVMMASharedLayout.get_default_for([M, K], gl.float16), a
    )
    b_smem = gl.allocate_shared_memory(
        gl.float16, [K, N], gl.NVMMASharedLayout.get_default_for([K, N], gl.float16), b
    )
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    tmem_layout: gl.constexpr = TensorMemoryLayout(block=(M, N), col_stride=1)
    acc = allocate_tensor_memory(gl.float32, [M, N], tmem_layout)
    tcgen05_mma(a_smem, b_smem, acc, use_acc=False)
    tcgen05_commit(bar)
    mbarrier.wait(bar, 0)
    if TMEM_LOAD_INFERS_LAYOUT:
        c = acc.load()
    else:
        c = acc.load(get_tmem_reg_layout(gl.float32, [M, N], tmem_layout, 4))
    c = gl.convert_layout(c, layout)
    gl.store(c_ptr + gl.expand_dims(rm, 1) * N + gl.expand_dims(rn, 0), c)


@gluon.jit
def _ws_loader(x_desc, bufs, ready, empty, num_tiles, STAGES: gl.constexpr):
    BM: gl.constexpr = x_desc.block_type.shape[0]
    for i in range(num_tiles):
        s = i % STAGES
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), x_desc.block_type.nbytes)
        tma_load(x_desc, [i * BM, 0], ready.index(s), bufs.index(s))


@gluon.jit
def _ws_reducer(out_ptr, bufs, ready, empty, num_tiles, STAGES: gl.constexpr, layout: gl.constexpr):
    BM: gl.constexpr = bufs.shape[1]
    for i in range(num_tiles):
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        tile = bufs.index(s).load(layout)
        mbarrier.arrive(empty.index(s), count=1)
        rows = i * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
        gl.store(out_ptr + rows, gl.sum(tile, axis=1))


@gluon.jit
def warp_specialized_row_sum(x_desc, out_ptr, num_tiles, STAGES: gl.constexpr, layout: gl.constexpr):
    """A loader partition fills a ring of STAGES shared buffers by TMA; the default partition sums rows."""
    BM: gl.constexpr = x_desc.block_type.shape[0]
    BN: gl.constexpr = x_desc.block_type.shape[1]
    bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES, BM, BN], x_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize(
        [
            (_ws_reducer, (out_ptr, bufs, ready, empty, num_tiles, STAGES, layout)),
            (_ws_loader, (x_desc, bufs, ready, empty, num_tiles, STAGES)),
        ],
        [1],
        [24],
    )


@gluon.jit
def uses_amd_buffer_load(x_ptr, out_ptr, BLOCK: gl.constexpr, layout: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=layout)
    x = gl.amd.cdna3.buffer_load(x_ptr, offs)
    gl.store(out_ptr + offs, x)


def nvmma_layout(block_shape: list[int], dtype: object) -> object:
    return gl.NVMMASharedLayout.get_default_for(block_shape, dtype)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 64}, num_warps=4)], key=["n"]
)
@triton.heuristics(values={"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@gluon.jit
def autotuned_scale(x_ptr, out_ptr, n, BLOCK: gl.constexpr, EVEN: gl.constexpr):
    """A module-level autotuned Gluon kernel: replay finds it by name (make_gluon_autotuned's cannot be)."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    if EVEN:  # noqa: SIM108 (a constexpr branch in a Gluon kernel)
        x = gl.load(x_ptr + offs)
    else:
        x = gl.load(x_ptr + offs, mask=offs < n)
    gl.store(out_ptr + offs, x * 2.0, mask=offs < n)


def make_gluon_autotuned(cache_results: bool = False) -> object:
    """A fresh autotuned + heuristics Gluon kernel (autotuners keep state, so each test gets its own)."""

    @triton.autotune(
        configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 64}, num_warps=4)],
        key=["n"],
        cache_results=cache_results,
    )
    @triton.heuristics(values={"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
    @gluon.jit
    def gluon_scale_kernel(x_ptr, out_ptr, n, BLOCK: gl.constexpr, EVEN: gl.constexpr):
        layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
        if EVEN:  # noqa: SIM108 (a constexpr branch in a Gluon kernel)
            x = gl.load(x_ptr + offs)
        else:
            x = gl.load(x_ptr + offs, mask=offs < n)
        gl.store(out_ptr + offs, x * 2.0, mask=offs < n)

    return gluon_scale_kernel


@gluon.jit
def _deadlocked_consumer(out_ptr, bar_a, bar_b):
    mbarrier.wait(bar_a, 0)  # BUG: waits for the producer, which waits for this partition
    gl.store(out_ptr, 1.0)
    mbarrier.arrive(bar_b, count=1)


@gluon.jit
def _deadlocked_producer(out_ptr, bar_a, bar_b):
    mbarrier.wait(bar_b, 0)
    gl.store(out_ptr + 1, 2.0)
    mbarrier.arrive(bar_a, count=1)


@gluon.jit
def deadlocked_partitions(out_ptr):
    bar_a = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    bar_b = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar_a, count=1)
    mbarrier.init(bar_b, count=1)
    gl.warp_specialize(
        [(_deadlocked_consumer, (out_ptr, bar_a, bar_b)), (_deadlocked_producer, (out_ptr, bar_a, bar_b))],
        [1],
        [24],
    )
