"""Launches for the batched engine's differential tests: each runs the same way in a TileLens recording and in a
plain ``TRITON_INTERPRET=1`` process (tests/stock_dump.py), on inputs made from a fixed seed.

The kernels are plain ``@triton.jit``: interpreted functions in the stock process (imported after
``TRITON_INTERPRET=1``), JIT functions that TileLens interprets in the test process. ``SUITE`` covers what the
batched builder implements (element-wise math, shapes, reductions, scans, dot, atomics, gathers, block
pointers, descriptors, bf16, 2-D and 3-D grids, large blocks for numpy loads and stores); ``FALLBACKS`` are
launches the engine must give up on, each with the reason it must record. Some need a construct only some
Triton releases have (block pointers: 3.6 to 3.8; ``tl.atomic_load``/``atomic_store``: 3.9): the tests skip
them elsewhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=(rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _square(x):
    return x * x


@triton.jit
def softmax_stats_kernel(x_ptr, y_ptr, stats_ptr, idx_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    z = x - tl.max(x, axis=0)
    e = tl.exp(z)
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)
    tl.store(stats_ptr + row * 3, tl.sum(_square(tl.where(mask, x, 0.0))))
    tl.store(stats_ptr + row * 3 + 1, tl.min(x, axis=0))
    tl.store(stats_ptr + row * 3 + 2, tl.sum(tl.cumsum(tl.where(mask, x, 0.0), axis=0), axis=0))
    tl.store(idx_ptr + row, tl.argmax(x, axis=0))


@triton.jit
def shapes_kernel(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    pid = tl.program_id(0)
    base = pid * R * C
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + base + offs)
    t = tl.trans(x)  # (C, R)
    r = tl.reshape(t, (R * C,))
    a, b = tl.split(tl.reshape(x, (R, C // 2, 2)))
    j = tl.join(b, a)  # (R, C // 2, 2)
    s = tl.sum(j, axis=2) + tl.sum(x, axis=1, keep_dims=True)  # (R, C // 2)
    c = tl.clamp(r, -0.5, 0.5) * (pid + 1) + tl.reshape(x.T, (R * C,)) * 0.25
    tl.store(out_ptr + base + tl.arange(0, R * C), c)
    tl.store(out_ptr + base + tl.arange(0, R * C // 2), tl.reshape(s, (R * C // 2,)) + 1.0)


@triton.jit
def grid3d_kernel(out_ptr, nx, ny, nz, BLOCK: tl.constexpr):
    x = tl.program_id(0)
    y = tl.program_id(1)
    z = tl.program_id(2)
    offs = tl.arange(0, BLOCK)
    flat = (x * ny + y) * nz + z
    value = flat * 1000 + offs + tl.num_programs(0) * 7 - (y // 2) % 3
    tl.store(out_ptr + flat * BLOCK + offs, value.to(tl.int32))


@triton.jit
def assume_kernel(x_ptr, out_ptr, n, limit, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    tl.assume(pid >= 0)
    tl.assume(pid < limit)  # with limit below the grid, program ``limit`` fails it (after the ones before)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


@triton.jit
def histogram_kernel(idx_ptr, counts_ptr, total_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    idx = tl.load(idx_ptr + offs, mask=mask, other=0)
    tl.atomic_add(counts_ptr + idx, 1, mask=mask)
    tl.atomic_max(total_ptr, tl.max(tl.where(mask, idx, 0), axis=0))


@triton.jit
def gather_kernel(src_ptr, idx_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    idx = tl.load(idx_ptr + offs)
    tl.store(out_ptr + offs, tl.load(src_ptr + idx) * 2.0)


@triton.jit
def bf16_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = x * x + x
    tl.store(out_ptr + offs, y, mask=mask)
    tl.atomic_add(out_ptr + n + tl.program_id(0) % 2, tl.sum(y.to(tl.float32), axis=0).to(tl.bfloat16))


@triton.jit
def loop_kernel(x_ptr, out_ptr, n, step, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, step):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + pid * n + offs, mask=offs < n, other=0.0)
    if n > 8:
        acc = acc * 2
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


@triton.jit
def block_ptr_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
    dst = tl.make_block_ptr(out_ptr, (M, N), (N, 1), (pid * BM, 0), (BM, BN), (1, 0))
    tl.store(dst, tl.load(src, boundary_check=(0, 1)) + 1.0, boundary_check=(0, 1))


@triton.jit
def block_ptr_moves_kernel(
    x_ptr, y_ptr, out_ptr, last_ptr, M, N: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr
):
    """Block pointers whose base, shape and advances differ between programs, one the same in every program
    (loaded), and one stored by every program at the same place (the last program's values stay). ``N`` is a
    constexpr: the stock Triton 3.6 interpreter cannot loop over a runtime bound under numpy >= 2.4."""
    pid = tl.program_id(0)
    src = tl.make_block_ptr(x_ptr + pid * BM * N, (M - pid * BM, N), (N, 1), (0, 0), (BM, BN), (1, 0))
    shared = tl.make_block_ptr(y_ptr, (BM, BN), (BN, 1), (0, 0), (BM, BN), (1, 0))
    acc = tl.load(shared)
    for _ in range(0, N, BN):
        acc += tl.load(src, boundary_check=(0, 1), padding_option="zero")
        src = tl.advance(src, (0, BN))
    dst = tl.advance(tl.make_block_ptr(out_ptr, (M, BN), (BN, 1), (0, 0), (BM, BN), (1, 0)), (pid * BM, 0))
    tl.store(dst, acc, boundary_check=(0, 1))
    tl.store(tl.make_block_ptr(last_ptr, (BM, BN), (BN, 1), (0, 0), (BM, BN), (1, 0)), acc + pid)


@triton.jit
def descriptor_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dst.store([pid * BM, 0], src.load([pid * BM, 0]))


@triton.jit
def descriptor_loop_kernel(x_ptr, out_ptr, M, N: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """Descriptors at program-dependent offsets in a loop over column blocks; the last row block runs past
    ``M`` (zero and NaN padding on load, masked store). ``N`` is a constexpr for the stock 3.6 interpreter."""
    pid = tl.program_id(0)
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    nan = tl.make_tensor_descriptor(
        x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN], padding_option="nan"
    )
    dst = tl.make_tensor_descriptor(out_ptr, shape=[M, BN], strides=[BN, 1], block_shape=[BM, BN])
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for j in range(0, N, BN):
        v = nan.load([pid * BM, j])
        acc += src.load([pid * BM, j]) * 2.0 + tl.where(v == v, v, 100.0)
    dst.store([pid * BM, 0], acc)


@triton.jit
def descriptor_program_base_kernel(x_ptr, out_ptr, N: tl.constexpr, BM: tl.constexpr):
    """A descriptor whose own base differs between programs (the batched engine gives up on it)."""
    pid = tl.program_id(0)
    src = tl.make_tensor_descriptor(x_ptr + pid * BM * N, shape=[BM, N], strides=[N, 1], block_shape=[BM, N])
    dst = tl.make_tensor_descriptor(
        out_ptr + pid * BM * N, shape=[BM, N], strides=[N, 1], block_shape=[BM, N]
    )
    dst.store([0, 0], src.load([0, 0]) + 1.0)


@triton.jit
def descriptor_misaligned_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """Program 1's column offset (3 fp32 elements) is not 16-byte aligned: Triton's interpreter raises there."""
    pid = tl.program_id(0)
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dst.store([pid * BM, 0], src.load([pid * BM, pid * 3]))


@triton.jit
def oob_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # no mask: the last program reads past x
    tl.store(out_ptr + offs, x, mask=offs < n)


# -- launches the batched engine must give up on ---------------------------------------------------------------


@triton.jit
def bulk_memory_kernel(x_ptr, h_ptr, out_ptr, half_ptr, rev_ptr, small_ptr, n, BLOCK: tl.constexpr):
    """Blocks large enough for numpy's loads and stores (tilelens.core.engine.fastmem), and stores it must leave to
    the interpreter's loop: two lanes per address (the later lane wins), decreasing addresses."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=-7.5)
    h = tl.load(h_ptr + offs, mask=mask, other=3)
    tl.store(out_ptr + offs, x * 2.0 + h.to(tl.float32), mask=mask)
    tl.store(half_ptr + offs // 2, x, mask=mask)
    tl.store(rev_ptr + (n - 1 - offs), h, mask=mask)
    tl.store(small_ptr + offs, (h & 0xFF).to(tl.int8), mask=mask)
    tl.store(out_ptr + n + offs % 3, x + h, mask=offs < 3)


@triton.jit
def divergent_kernel(out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    if pid % 2 == 0:
        tl.store(out_ptr + pid * BLOCK + offs, offs * 1.0)
    else:
        tl.store(out_ptr + pid * BLOCK + offs, offs * -1.0)


@triton.jit
def reads_others_kernel(buf_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    prev = tl.load(buf_ptr + pid * BLOCK + offs)  # program p reads what program p - 1 wrote
    tl.store(buf_ptr + (pid + 1) * BLOCK + offs, prev + 1.0)


@triton.jit
def float_atomic_loop_kernel(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + pid * n + offs, mask=offs < n, other=0.0)
        tl.atomic_add(total_ptr, tl.sum(x, axis=0))


@triton.jit
def spin_lock_kernel(lock_ptr, count_ptr):
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    tl.store(count_ptr, tl.load(count_ptr) + 1)
    tl.atomic_xchg(lock_ptr, 0)


@triton.jit
def writes_then_diverges_kernel(out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + pid * BLOCK + offs, offs * 1.0 + pid)  # written by the batched run, then put back
    for _ in range(pid):  # a loop bound that differs between programs
        tl.store(out_ptr + pid * BLOCK + offs, tl.load(out_ptr + pid * BLOCK + offs) * 2.0)


@triton.jit
def failing_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x + 1.0, mask=offs < n)
    tl.store(x_ptr + offs, x.not_a_method(), mask=offs < n)


@triton.jit
def atomic_load_store_kernel(x_ptr, out_ptr, flags_ptr, BLOCK: tl.constexpr):
    """Triton 3.9's ``tl.atomic_load``/``atomic_store`` (acquire, release: they order memory between
    programs)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_store(out_ptr + offs, tl.atomic_load(x_ptr + offs) * 2.0)
    tl.atomic_store(flags_ptr + pid, 1)


@triton.jit
def print_kernel(x_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.device_print("x", x)
    tl.store(x_ptr + offs, x + 1)


Run = Callable[[Callable[..., object]], None]


def _seeded() -> None:
    torch.manual_seed(1234)


def case_add(launch: Run) -> None:
    x, y, out = torch.randn(1000), torch.randn(1000), torch.empty(1000)
    launch(lambda: add_kernel[(4,)](x, y, out, 1000, BLOCK=256))


def case_matmul(launch: Run) -> None:
    a, b, c = torch.randn(48, 40), torch.randn(40, 56), torch.zeros(48, 56)
    launch(lambda: matmul_kernel[(3, 4)](a, b, c, 48, 56, 40, BM=16, BN=16, BK=8))


def case_softmax_stats(launch: Run) -> None:
    x = torch.randn(6, 100) * 10
    y, stats, idx = torch.empty(6, 100), torch.empty(6, 3), torch.empty(6, dtype=torch.int32)
    launch(lambda: softmax_stats_kernel[(6,)](x, y, stats, idx, 100, BLOCK=128))


def case_shapes(launch: Run) -> None:
    x, out = torch.randn(5, 8, 4), torch.zeros(5, 8, 4)
    launch(lambda: shapes_kernel[(5,)](x, out, R=8, C=4))


def case_grid3d(launch: Run) -> None:
    out = torch.zeros(3 * 4 * 2 * 16, dtype=torch.int32)
    launch(lambda: grid3d_kernel[(3, 4, 2)](out, 3, 4, 2, BLOCK=16))


def case_assume(launch: Run) -> None:
    x, out = torch.randn(100), torch.zeros(100)
    launch(lambda: assume_kernel[(4,)](x, out, 100, 4, BLOCK=32))


def case_assume_fails(launch: Run) -> None:
    x, out = torch.randn(100), torch.zeros(100)
    launch(lambda: assume_kernel[(4,)](x, out, 100, 2, BLOCK=32))


def case_histogram(launch: Run) -> None:
    idx = torch.randint(0, 16, (1000,), dtype=torch.int32)
    counts, total = torch.zeros(16, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    launch(lambda: histogram_kernel[(4,)](idx, counts, total, 1000, BLOCK=256))


def case_gather(launch: Run) -> None:
    src, idx, out = torch.randn(64), torch.randint(0, 64, (96,), dtype=torch.int32), torch.empty(96)
    launch(lambda: gather_kernel[(3,)](src, idx, out, BLOCK=32))


def case_bf16(launch: Run) -> None:
    x, out = torch.randn(300).to(torch.bfloat16), torch.zeros(300 + 3, dtype=torch.bfloat16)
    launch(lambda: bf16_kernel[(3,)](x, out, 300, BLOCK=128))


def case_loop(launch: Run) -> None:
    x, out = torch.randn(4, 40), torch.empty(4, 16)
    launch(lambda: loop_kernel[(4,)](x, out, 40, 16, BLOCK=16))


def case_block_ptr(launch: Run) -> None:
    x, out = torch.randn(70, 32), torch.zeros(70, 32)
    launch(lambda: block_ptr_kernel[(3,)](x, out, 70, 32, BM=32, BN=32))


def case_block_ptr_moves(launch: Run) -> None:
    x, y = torch.randn(70, 48), torch.randn(32, 16)
    out, last = torch.zeros(70, 16), torch.zeros(32, 16)
    launch(lambda: block_ptr_moves_kernel[(3,)](x, y, out, last, 70, N=48, BM=32, BN=16))


def case_descriptor(launch: Run) -> None:
    x, out = torch.randn(64, 16), torch.zeros(64, 16)
    launch(lambda: descriptor_kernel[(4,)](x, out, 64, 16, BM=16, BN=16))


def case_descriptor_loop(launch: Run) -> None:
    x, out = torch.randn(70, 48), torch.zeros(70, 16)
    x[3, 5] = float("nan")  # a NaN of the data, not of the padding: summed as 100 like the padding's
    launch(lambda: descriptor_loop_kernel[(3,)](x, out, 70, N=48, BM=32, BN=16))


def case_descriptor_program_base(launch: Run) -> None:
    x, out = torch.randn(4 * 8, 16), torch.zeros(4 * 8, 16)
    launch(lambda: descriptor_program_base_kernel[(4,)](x, out, N=16, BM=8))


def case_descriptor_misaligned(launch: Run) -> None:
    x, out = torch.randn(32, 16), torch.zeros(32, 16)
    launch(lambda: descriptor_misaligned_kernel[(4,)](x, out, 32, 16, BM=8, BN=8))


def case_oob(launch: Run) -> None:
    buf = torch.randn(200)
    x, out = buf[:100], torch.zeros(100)
    launch(lambda: oob_kernel[(4,)](x, out, 100, BLOCK=32))


def case_bulk_memory(launch: Run) -> None:
    n = 5000
    x, h = torch.randn(n), torch.randint(-(2**15), 2**15, (n,), dtype=torch.int16)
    out, half = torch.zeros(n + 3), torch.zeros((n + 1) // 2)
    rev, small = torch.zeros(n, dtype=torch.int16), torch.zeros(n, dtype=torch.int8)
    launch(lambda: bulk_memory_kernel[(3,)](x, h, out, half, rev, small, n, BLOCK=2048))


def case_divergent(launch: Run) -> None:
    out = torch.zeros(4, 8)
    launch(lambda: divergent_kernel[(4,)](out, BLOCK=8))


def case_reads_others(launch: Run) -> None:
    buf = torch.randn(5 * 8)
    launch(lambda: reads_others_kernel[(4,)](buf, BLOCK=8))


def case_float_atomic_loop(launch: Run) -> None:
    x, total = torch.randn(4, 64) * 1e4, torch.zeros(1)
    launch(lambda: float_atomic_loop_kernel[(4,)](x, total, 64, BLOCK=16))


def case_spin_lock(launch: Run) -> None:
    lock, count = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    launch(lambda: spin_lock_kernel[(3,)](lock, count))


def case_writes_then_diverges(launch: Run) -> None:
    out = torch.zeros(4, 8)
    launch(lambda: writes_then_diverges_kernel[(4,)](out, BLOCK=8))


def case_kernel_error(launch: Run) -> None:
    x = torch.randn(40)
    launch(lambda: failing_kernel[(3,)](x, 40, BLOCK=16))


def case_atomic_load_store(launch: Run) -> None:
    x, out, flags = torch.randn(64), torch.zeros(64), torch.zeros(4, dtype=torch.int32)
    launch(lambda: atomic_load_store_kernel[(4,)](x, out, flags, BLOCK=16))


def case_print(launch: Run) -> None:
    x = torch.randn(16)
    launch(lambda: print_kernel[(2,)](x, BLOCK=8))


SUITE: dict[str, Callable[[Run], None]] = {
    "add": case_add,
    "matmul": case_matmul,
    "softmax_stats": case_softmax_stats,
    "shapes": case_shapes,
    "grid3d": case_grid3d,
    "assume": case_assume,
    "histogram": case_histogram,
    "gather": case_gather,
    "bf16": case_bf16,
    "loop": case_loop,
    "block_ptr": case_block_ptr,
    "block_ptr_moves": case_block_ptr_moves,
    "descriptor": case_descriptor,
    "descriptor_loop": case_descriptor_loop,
    "oob": case_oob,
    "bulk_memory": case_bulk_memory,
}
# Each launch the batched engine must not run batched, with the reason its record must give.
FALLBACKS: dict[str, tuple[Callable[[Run], None], str]] = {
    "divergent": (case_divergent, "divergent control flow"),
    "reads_others": (case_reads_others, "cross-program memory dependence"),
    "float_atomic_loop": (case_float_atomic_loop, "cross-program memory dependence"),
    "spin_lock": (case_spin_lock, "atomic_cas"),
    "print": (case_print, "device_print"),
    "writes_then_diverges": (case_writes_then_diverges, "divergent control flow"),
    "kernel_error": (case_kernel_error, "error in the batched run: AttributeError"),
    "assume_fails": (case_assume_fails, "error in the batched run: AssertionError"),
    "descriptor_program_base": (
        case_descriptor_program_base,
        "unsupported with batched operands: create_make_tensor_descriptor",
    ),
    "descriptor_misaligned": (case_descriptor_misaligned, "error in the batched run: AssertionError"),
    "atomic_load_store": (case_atomic_load_store, "atomic_load"),  # Triton 3.9 on
}


def workload(index: int) -> Callable[[Run], None]:
    """The seed workload ``index`` of ``benchmarks.workloads.all_cases(quick=True)`` as a case."""

    def case(launch: Run) -> None:
        from benchmarks.workloads import all_cases

        chosen = all_cases(quick=True)[index]
        launch(chosen.run)

    return case


@contextlib.contextmanager
def _zeroed_empty() -> Iterator[None]:
    """``torch.empty``/``empty_like`` give zeros for the block: uninitialised memory differs between runs,
    and a tensor a kernel only partly writes must compare equal everywhere."""
    empty, empty_like = torch.empty, torch.empty_like

    def zeroed(*args: Any, **kwargs: Any) -> torch.Tensor:
        return empty(*args, **kwargs).zero_()

    def zeroed_like(*args: Any, **kwargs: Any) -> torch.Tensor:
        return empty_like(*args, **kwargs).zero_()

    torch.empty, torch.empty_like = zeroed, zeroed_like  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.empty, torch.empty_like = empty, empty_like  # type: ignore[assignment]


def run_case(name: str, launch: Run) -> None:
    """Seed, then run the case ``name`` ("suite:add", "fallback:print", "workload:3")."""
    kind, _, key = name.partition(":")
    _seeded()
    with _zeroed_empty():
        if kind == "suite":
            SUITE[key](launch)
        elif kind == "fallback":
            FALLBACKS[key][0](launch)
        else:
            workload(int(key))(launch)
