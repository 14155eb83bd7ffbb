"""Exact access traces of small kernels, checked against offsets computed by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from tests import kernels
from tilelens.core import compat
from tilelens.core.interpreted.trace import TritonTrace
from tilelens.store.files.traces import lane_mask, lane_offsets, lane_oob


def rows(record):
    return record.trace.to_pylist()


def test_masked_vector_add_counts_exact_lanes():
    n, block = 1000, 256
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    traced = TritonTrace(kernels.add_kernel, in_place=False)
    traced[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    assert torch.equal(out, x + y)
    rec = traced.records[-1]
    assert rec.grid == (4, 1, 1)
    assert rec.per_arg[0].load_lanes == n and rec.per_arg[0].loads == 4
    assert rec.per_arg[1].load_lanes == n and rec.per_arg[1].loads == 4
    assert rec.per_arg[2].store_lanes == n and rec.per_arg[2].stores == 4
    assert rec.summary.load_lanes == 2 * n and rec.summary.store_lanes == n
    assert rec.summary.lanes == 12 * block
    assert rec.summary.bytes_loaded == 2 * n * 4 and rec.summary.bytes_stored == n * 4
    assert rec.summary.oob_lanes == 0
    for row in rows(rec):
        offs = lane_offsets(row)
        np.testing.assert_array_equal(offs, row["pid_x"] * block + np.arange(block))
        np.testing.assert_array_equal(lane_mask(row), offs < n)
        assert row["offsets"] is None, "affine blocks are stored as base + strides"
    lines = {r["op"]: r["line"] for r in rows(rec)}
    src = kernels.add_kernel.fn.__code__
    with open(src.co_filename) as f:
        body = f.read().splitlines()
    assert "tl.store(out_ptr" in body[lines["store"] - 1]


def test_tiled_matmul_offsets_match_hand_computed():
    M = N = K = 64
    B = 32
    a, b, c = torch.randn(M, K), torch.randn(K, N), torch.empty(M, N)
    traced = TritonTrace(kernels.matmul_kernel, in_place=False)
    traced[(M // B, N // B)](a, b, c, M, N, K, BM=B, BN=B, BK=B)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    rec = traced.records[-1]
    assert rec.grid == (2, 2, 1)
    i = np.arange(B)[:, None]
    j = np.arange(B)[None, :]
    seen = {0: 0, 1: 0, 2: 0}
    for row in rows(rec):
        pm, pn, ev = row["pid_x"], row["pid_y"], row["event"]
        offs = lane_offsets(row)
        if row["op"] == "load" and row["arg"] == 0:
            k = (ev // 2) * B
            expected = (pm * B + i) * K + k + j
        elif row["op"] == "load" and row["arg"] == 1:
            k = (ev // 2) * B
            expected = (k + i) * N + pn * B + j
        else:
            assert row["op"] == "store" and row["arg"] == 2 and ev == 4
            expected = (pm * B + i) * N + pn * B + j
        np.testing.assert_array_equal(offs, expected)
        assert row["strides"] is not None
        seen[row["arg"]] += 1
    assert seen == {0: 8, 1: 8, 2: 4}
    assert rec.summary.load_lanes == 2 * 4 * 2 * B * B and rec.summary.store_lanes == M * N


def test_out_of_bounds_lanes_are_exact():
    buf = torch.arange(256, dtype=torch.float32)
    x = buf[:100]  # the kernel reads 28 elements past x, into memory no argument owns
    out = torch.empty(100)
    traced = TritonTrace(kernels.unmasked_copy_kernel, in_place=False)
    traced[(1,)](x, out, 100, BLOCK=128)
    rec = traced.records[-1]
    assert rec.summary.oob_lanes == 28
    assert rec.per_arg[0].oob_lanes == 28 and rec.per_arg[1].oob_lanes == 0
    load = next(r for r in rows(rec) if r["op"] == "load")
    oob = lane_oob(load)
    np.testing.assert_array_equal(np.nonzero(oob)[0], np.arange(100, 128))
    np.testing.assert_array_equal(lane_offsets(load)[oob], np.arange(100, 128))
    assert load["oob"] == 28 and load["active"] == 128
    assert torch.equal(out, x)


def test_nested_jit_helpers_and_tl_sum_run_interpreted():
    x = torch.randn(3, 16)
    out = torch.empty(3)
    traced = TritonTrace(kernels.row_sum_of_squares, in_place=False)
    traced[(3,)](x, out, N=16)
    torch.testing.assert_close(out, (x * x).sum(1))
    assert traced.records[-1].summary.load_lanes == 48


def test_atomics_are_recorded_with_their_op():
    idx = torch.tensor([0, 1, 1, 3, 3, 3], dtype=torch.int32)
    counts = torch.zeros(4, dtype=torch.int32)
    traced = TritonTrace(kernels.histogram_kernel, in_place=False)
    traced[(1,)](idx, counts, 6, BLOCK=8)
    assert counts.tolist() == [1, 2, 0, 3]
    rec = traced.records[-1]
    atomic = next(r for r in rows(rec) if r["op"].startswith("atomic"))
    assert atomic["op"] == "atomic_add" and atomic["arg"] == 1
    assert atomic["active"] == 6 and atomic["offsets"] is not None
    np.testing.assert_array_equal(lane_offsets(atomic)[lane_mask(atomic)], [0, 1, 1, 3, 3, 3])
    assert rec.summary.atomics == 1 and rec.summary.atomic_lanes == 6


def test_gather_keeps_every_lane_offset():
    src = torch.arange(32, dtype=torch.float32)
    idx = torch.tensor([5, 3, 31, 0, 7, 7, 1, 2], dtype=torch.int64)
    out = torch.empty(8)
    traced = TritonTrace(kernels.gather_kernel, in_place=False)
    traced[(1,)](src, idx, out, BLOCK=8)
    assert torch.equal(out, src[idx])
    gather = [r for r in rows(traced.records[-1]) if r["arg"] == 0][0]
    assert gather["strides"] is None
    np.testing.assert_array_equal(lane_offsets(gather), idx.numpy())


@pytest.mark.skipif(not compat.HAS_BLOCK_POINTERS, reason=compat.NO_BLOCK_POINTERS)
def test_block_pointers_are_traced():
    M, N = 10, 8
    x = torch.randn(M, N)
    out = torch.zeros(M, N)
    traced = TritonTrace(kernels.block_ptr_copy, in_place=False)
    traced[(3,)](x, out, M, N, BM=4, BN=8)
    assert torch.equal(out, x)
    rec = traced.records[-1]
    assert rec.summary.load_lanes == M * N and rec.summary.store_lanes == M * N
    assert rec.summary.oob_lanes == 0


@pytest.mark.skipif(
    compat.HAS_BLOCK_POINTERS, reason=f"Triton {compat.triton.__version__} has block pointers"
)
def test_a_removed_block_pointer_is_recorded_as_the_error_triton_raises():
    x = torch.randn(10, 8)
    out = torch.zeros(10, 8)
    traced = TritonTrace(kernels.block_ptr_copy, in_place=False)
    with pytest.raises(compat.InterpreterError, match="Block pointers have been removed"):
        traced[(3,)](x, out, 10, 8, BM=4, BN=8)
    rec = traced.records[-1]
    assert rec.status == "error" and "Block pointers have been removed" in str(rec.error)
    assert not out.any() and rec.summary.lanes == 0


def test_tensor_descriptors_are_traced_with_padding_lanes_masked():
    M, N = 10, 16
    x = torch.randn(M, N)
    out = torch.zeros(M, N)
    traced = TritonTrace(kernels.descriptor_copy, in_place=False)
    traced[(3,)](x, out, M, N, BM=4, BN=16)
    assert torch.equal(out, x)
    rec = traced.records[-1]
    # 3 programs x 4 rows x 16 columns = 192 lanes per op; the last block's 2 rows past M are masked off
    assert rec.summary.lanes == 2 * 192
    assert rec.summary.load_lanes == M * N and rec.summary.store_lanes == M * N
    last = [r for r in rows(rec) if r["pid_x"] == 2]
    for row in last:
        np.testing.assert_array_equal(lane_mask(row), (8 + np.arange(4))[:, None].repeat(16, 1) < M)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int8])
def test_element_size_follows_dtype(dtype):
    n = 100
    x = torch.ones(n, dtype=dtype)
    y = torch.ones(n, dtype=dtype)
    out = torch.empty(n, dtype=dtype)
    traced = TritonTrace(kernels.add_kernel, in_place=False)
    traced[(1,)](x, y, out, n, BLOCK=128)
    rec = traced.records[-1]
    assert rec.summary.bytes_loaded == 2 * n * x.element_size()
    assert rec.trace.column("elem_bytes").to_pylist()[0] == x.element_size()


def test_aliased_views_are_flagged_and_attributed_to_a_containing_argument():
    buf = torch.arange(300, dtype=torch.float32)
    x, y = buf[:200], buf[100:300]  # y overlaps the second half of x
    out = torch.empty(200)
    traced = TritonTrace(kernels.add_kernel, in_place=False)
    traced[(1,)](x, y, out, 200, BLOCK=256)
    assert torch.equal(out, torch.arange(200.0) + torch.arange(100.0, 300.0))
    rec = traced.records[-1]
    assert rec.config["aliased_args"] == [[0, 1]]
    assert rec.summary.oob_lanes == 0
    loads = [r for r in rows(rec) if r["op"] == "load"]
    assert [r["arg"] for r in loads] == [0, 1]
    np.testing.assert_array_equal(lane_offsets(loads[1])[lane_mask(loads[1])], np.arange(200))


def test_records_without_snapshots_keep_geometry_and_trace():
    x, y, out = torch.randn(100), torch.randn(100), torch.empty(100)
    traced = TritonTrace(kernels.add_kernel, in_place=False, snapshots=False)
    traced[(1,)](x, y, out, 100, BLOCK=128)
    assert torch.equal(out, x + y)
    rec = traced.records[-1]
    tensors = [a for a in rec.args if a.kind == "tensor"]
    assert [a.shape for a in tensors] == [(100,), (100,), (100,)]
    assert all(a.before is None and a.after is None for a in tensors)
    assert rec.summary.load_lanes == 200 and rec.summary.store_lanes == 100


@triton.jit
def _aliased_rows_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + offs, mask=offs < n, other=0.0)
    y = tl.load(y_ptr + row * stride + offs, mask=offs < n, other=0.0)
    z = tl.load(z_ptr + row * stride + offs)  # z overlaps y: read through both views
    tl.store(out_ptr + row * stride + offs, x * 2 + y - z, mask=offs < n)  # out is x: an in-place write


@pytest.mark.parametrize("cols", [16, 13])
def test_aliased_views_get_the_same_trace_from_the_batched_and_the_per_program_engine(
    cols: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Views overlapping one another (an in-place output, a view offset into another): the batched engine's
    whole-batch rows must be, byte for byte, the rows the per-program analysis gives."""
    from tilelens.core.engine import batchrows

    fast: list[int] = []
    real = batchrows._aliased_spans
    monkeypatch.setattr(
        batchrows,
        "_aliased_spans",
        lambda *a: (lambda out: fast.append(sum(s is not None for s in out)) or out)(real(*a)),
    )
    traces = {}
    for engine in ("batched", "program"):
        monkeypatch.setenv("TILELENS_ENGINE", engine)
        x = torch.arange(6 * 16, dtype=torch.float32).view(6, 16)
        buf = torch.randn(6 * 16 + 40, generator=torch.Generator().manual_seed(3))
        y, z = buf[: 6 * 16].view(6, 16), buf[40:].view(6, 16)  # z starts inside y
        traced = TritonTrace(_aliased_rows_kernel, in_place=False)
        traced[(6,)](x, y, z, x, cols, 16, BLOCK=16)
        rec = traced.records[-1]
        assert rec.config["engine"]["mode"] == engine
        assert sorted(rec.config["aliased_args"]) == [[0, 3], [1, 2]]
        traces[engine] = (rec.trace, rec.summary, rec.per_arg, bytes(x.numpy().tobytes()))
    assert fast == [6, 6, 6, 6]  # every program of every event took the whole-batch rows
    assert traces["batched"][0].equals(traces["program"][0])
    assert traces["batched"][1:] == traces["program"][1:]
    assert sorted(set(traces["batched"][0].column("arg").to_pylist())) == [0, 1, 2]  # out is x: position 0
