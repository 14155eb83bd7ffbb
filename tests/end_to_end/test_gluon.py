"""Gluon kernels on the CPU: simulated values, exact access traces, recorded errors, bit-exact replay."""

from __future__ import annotations

import inspect
import threading

import pytest
import torch
import triton
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

import tilelens
from tests import gluon_kernels as gk
from tilelens.core.interpreted.trace import GluonTrace
from tilelens.replay import replay_launch
from tilelens.store import History
from tilelens.store.files.traces import lane_mask, lane_offsets
from tilelens.store.sql.models import Launch

gl = gk.gl


def _partition_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tilelens-gluon-partition")]


def _line(kernel, text: str) -> int:
    """The file line of the first statement of ``kernel`` containing ``text``."""
    lines, start = inspect.getsourcelines(kernel.fn)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(f"{text!r} not in {kernel.fn.__name__}")


def _rows(record):
    return record.trace.to_pylist()


def _summary(record):
    s = record.summary
    return {
        "events": s.events,
        "loads": s.loads,
        "stores": s.stores,
        "atomics": s.atomics,
        "load_lanes": s.load_lanes,
        "store_lanes": s.store_lanes,
        "lanes": s.lanes,
        "bytes_loaded": s.bytes_loaded,
        "bytes_stored": s.bytes_stored,
        "oob_lanes": s.oob_lanes,
    }


def test_vector_add_trace_is_exact():
    traced = GluonTrace(gk.vector_add)
    x, y = torch.randn(1000), torch.randn(1000)
    out = torch.empty(1000)
    traced[(4,)](x, y, out, 1000, BLOCK=256, layout=gk.BLOCKED_1D)
    assert torch.equal(out, x + y)
    rec = traced.records[-1]
    assert rec.status == "ok" and rec.backend == "interpreter"
    assert _summary(rec) == {
        "events": 12,
        "loads": 8,
        "stores": 4,
        "atomics": 0,
        "load_lanes": 2000,
        "store_lanes": 1000,
        "lanes": 12 * 256,
        "bytes_loaded": 8000,
        "bytes_stored": 4000,
        "oob_lanes": 0,
    }
    load_x, load_y = _line(gk.vector_add, "x = gl.load"), _line(gk.vector_add, "y = gl.load")
    store = _line(gk.vector_add, "gl.store")
    rows = _rows(rec)
    assert [(r["pid_x"], r["event"], r["op"], r["arg"], r["line"]) for r in rows] == [
        (p, e, op, arg, line)
        for p in range(4)
        for e, (op, arg, line) in enumerate([("load", 0, load_x), ("load", 1, load_y), ("store", 2, store)])
    ]
    for r in rows:
        assert (r["shape"], r["base"], r["strides"]) == ([256], 256 * r["pid_x"], [1])
        active = min(256, 1000 - 256 * r["pid_x"])
        assert r["active"] == active and r["oob"] == 0
        assert lane_mask(r).tolist() == [i < active for i in range(256)]
    assert "shared_memory" not in rec.config
    assert rec.config["constexprs"]["layout"]["gluon_layout"] == "BlockedLayout"


def test_row_sum_through_shared_memory_trace_is_exact():
    traced = GluonTrace(gk.row_sum_through_shared)
    x = torch.randn(100, 64)
    out = torch.empty(100)
    traced[(4,)](x, out, 100, N=64, BM=32, layout=gk.BLOCKED_2D)
    expected = x[:, :32].double().sum(1) + x[:, 32:].double().sum(1)
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-5)
    rec = traced.records[-1]
    # Shared memory never counts as global traffic: 4 tile loads and 4 row stores, 100 rows of 64 read.
    assert _summary(rec) == {
        "events": 8,
        "loads": 4,
        "stores": 4,
        "atomics": 0,
        "load_lanes": 6400,
        "store_lanes": 100,
        "lanes": 4 * (32 * 64 + 32),
        "bytes_loaded": 6400 * 4,
        "bytes_stored": 400,
        "oob_lanes": 0,
    }
    assert rec.config["shared_memory"] == {
        "events": 12,
        "load_lanes": 4 * 2 * 32 * 32,
        "store_lanes": 4 * 32 * 64,
    }
    k = gk.row_sum_through_shared
    expect = [
        ("load", 0, _line(k, "x = gl.load"), [32, 64], [64, 1]),
        ("shared_store", -2, _line(k, "smem.store"), [32, 64], [64, 1]),
        ("shared_load", -2, _line(k, "left ="), [32, 32], [64, 1]),
        ("shared_load", -2, _line(k, "right ="), [32, 32], [64, 1]),
        ("store", 1, _line(k, "gl.store"), [32], [1]),
    ]
    rows = _rows(rec)
    assert len(rows) == 4 * len(expect)
    for r in rows:
        op, arg, line, shape, strides = expect[r["event"]]
        assert (r["op"], r["arg"], r["line"], r["shape"], r["strides"]) == (op, arg, line, shape, strides)
        assert r["oob"] == 0
        if op == "load":
            assert r["base"] == 32 * 64 * r["pid_x"]
            assert r["active"] == 64 * min(32, 100 - 32 * r["pid_x"])
        elif op == "store":
            assert r["base"] == 32 * r["pid_x"]
        else:  # shared addresses restart at 0 in every program; the right half starts 32 elements in
            assert r["base"] == (32 if line == _line(k, "right =") else 0)
            assert r["active"] == r["lanes"]


def test_blocked_matmul_with_convert_layout_trace_is_exact():
    traced = GluonTrace(gk.blocked_matmul)
    a, b = torch.randn(64, 96), torch.randn(96, 32)
    c = torch.empty(64, 32)
    traced[(2, 1)](a, b, c, 64, 32, 96, BM=32, BN=32, BK=32, layout=gk.BLOCKED_2D)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-4)
    rec = traced.records[-1]
    assert (rec.summary.loads, rec.summary.stores, rec.summary.load_lanes, rec.summary.store_lanes) == (
        12,
        2,
        12 * 32 * 32,
        2 * 32 * 32,
    )
    load_a, load_b = _line(gk.blocked_matmul, "a = gl.load"), _line(gk.blocked_matmul, "b = gl.load")
    for pid in range(2):
        rows = [r for r in _rows(rec) if r["pid_x"] == pid]
        expect = []
        for k in range(0, 96, 32):
            expect.append(("load", 0, load_a, 32 * 96 * pid + k, [96, 1]))
            expect.append(("load", 1, load_b, 32 * k, [32, 1]))
        expect.append(("store", 2, _line(gk.blocked_matmul, "gl.store"), 32 * 32 * pid, [32, 1]))
        assert [(r["op"], r["arg"], r["line"], r["base"], r["strides"]) for r in rows] == expect


def test_shared_memory_views_compute_what_numpy_views_compute():
    traced = GluonTrace(gk.shared_views)
    x = torch.randn(16, 16)
    out = torch.empty(16 * 17)
    traced[(1,)](x, out, N=16, layout=gk.BLOCKED_2D)
    assert torch.equal(out[:256].view(16, 16), x.T)
    assert torch.equal(out[256:], x[0])  # int32 bits of row 0, bitcast back
    rows = [r for r in _rows(traced.records[-1]) if r["op"].startswith("shared")]
    # the allocation's initial value, the permuted view (strides swapped), row 0 of the reinterpreted view
    assert [(r["op"], r["shape"], r["base"], r["strides"]) for r in rows] == [
        ("shared_store", [16, 16], 0, [16, 1]),
        ("shared_load", [16, 16], 0, [1, 16]),
        ("shared_load", [16], 0, [1]),
    ]


def _tma_matmul(m=128, n=64, k=128):
    torch.manual_seed(0)
    a, b = torch.randn(m, k).half(), torch.randn(k, n).half()
    c = torch.empty(m, n).half()
    block = gk.nvmma_layout([64, 64], gl.float16)
    descs = [TensorDescriptor.from_tensor(t, [64, 64], block) for t in (a, b, c)]
    return a, b, c, descs


def test_tma_wgmma_matmul_traces_boxes_as_block_accesses():
    a, b, c, (ad, bd, cd) = _tma_matmul()
    traced = GluonTrace(gk.tma_wgmma_matmul)
    traced[(2, 1)](ad, bd, cd, 128, num_warps=4)
    # fp32 accumulation in two K steps, rounded to fp16 once: within an fp16 ulp of the fp32 product
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-3, atol=2e-2)
    rec = traced.records[-1]
    assert rec.status == "ok"
    k = gk.tma_wgmma_matmul
    tma_a, tma_b = _line(k, "tma_load(a_desc"), _line(k, "tma_load(b_desc")
    mma, tma_c = _line(k, "warpgroup_mma(a_smem"), _line(k, "tma_store(c_desc")
    for pid in range(2):
        rows = [r for r in _rows(rec) if r["pid_x"] == pid]
        expect = []
        for kk in (0, 64):
            expect += [("load", 0, tma_a, 64 * 128 * pid + kk), ("shared_store", -2, tma_a, 0)]
            expect += [("load", 1, tma_b, 64 * kk), ("shared_store", -2, tma_b, 64 * 64)]
            expect += [("shared_load", -2, mma, 0), ("shared_load", -2, mma, 64 * 64)]
        c_smem = (2 * 64 * 64 * 2 + 16) // 2  # after a, b and the barrier (16-byte aligned), in fp16 elements
        expect += [("shared_store", -2, _line(k, "c_smem.store"), c_smem), ("shared_load", -2, tma_c, c_smem)]
        expect += [("store", 2, tma_c, 64 * 64 * pid)]
        assert [(r["op"], r["arg"], r["line"], r["base"]) for r in rows] == expect
        assert all(r["shape"] == [64, 64] and r["oob"] == 0 for r in rows)
    assert (rec.summary.loads, rec.summary.stores, rec.summary.bytes_loaded) == (8, 2, 8 * 64 * 64 * 2)


def test_tcgen05_mma_accumulates_in_tensor_memory_which_is_not_traced():
    a, b = torch.randn(128, 64).half(), torch.randn(64, 64).half()
    c = torch.empty(128, 64)
    traced = GluonTrace(gk.tcgen05_matmul)
    traced[(1,)](a, b, c, M=128, N=64, K=64, layout=gk.BLOCKED_2D, num_warps=4)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-5, atol=1e-4)
    k = gk.tcgen05_matmul
    mma = _line(k, "tcgen05_mma(")
    assert [(r["op"], r["line"], r["base"]) for r in _rows(traced.records[-1])] == [
        ("load", _line(k, "a = gl.load"), 0),
        ("load", _line(k, "b = gl.load"), 0),
        ("shared_store", _line(k, "a_smem ="), 0),
        ("shared_store", _line(k, "b_smem ="), 128 * 64),
        ("shared_load", mma, 0),
        ("shared_load", mma, 128 * 64),
        ("store", _line(k, "gl.store"), 0),
    ]


def test_tma_box_past_the_tensor_end_is_clipped_not_out_of_bounds():
    x = torch.randn(40, 64)  # the second 32-row box covers rows 32..63: only 8 exist
    out = torch.empty(64)
    xd = TensorDescriptor.from_tensor(x, [32, 64], gk.nvmma_layout([32, 64], gl.float32))
    traced = GluonTrace(gk.warp_specialized_row_sum)
    traced[(1,)](xd, out, 2, STAGES=2, layout=gk.BLOCKED_2D)
    torch.testing.assert_close(out[:40].double(), x.double().sum(1), rtol=0, atol=1e-5)
    assert torch.equal(out[40:], torch.zeros(24))  # zero padding
    second = [r for r in _rows(traced.records[-1]) if r["op"] == "load"][1]
    assert (second["base"], second["active"], second["oob"]) == (32 * 64, 8 * 64, 0)
    assert lane_mask(second).reshape(-1).tolist() == [i < 8 * 64 for i in range(32 * 64)]
    assert lane_offsets(second)[7, 63] == 39 * 64 + 63


def test_warp_specialize_interleaves_partitions_deterministically():
    x = torch.randn(8 * 32, 64)
    out = torch.empty(8 * 32)
    xd = TensorDescriptor.from_tensor(x, [32, 64], gk.nvmma_layout([32, 64], gl.float32))
    traced = GluonTrace(gk.warp_specialized_row_sum)
    traced[(1,)](xd, out, 8, STAGES=3, layout=gk.BLOCKED_2D)
    traced[(1,)](xd, out, 8, STAGES=3, layout=gk.BLOCKED_2D)
    assert _partition_threads() == []  # every partition thread has ended
    torch.testing.assert_close(out.double(), x.double().sum(1), rtol=0, atol=1e-5)
    first, second = traced.records[-2], traced.records[-1]
    assert first.trace.equals(second.trace)
    # The default partition waits for tile 0, the loader fills the 3-deep ring and waits for a free slot,
    # the reducer drains it, and so on: a fixed interleaving.
    load = ["load", "shared_store"]
    reduce = ["shared_load", "store"]
    order = load * 3 + reduce * 3 + load * 3 + reduce * 3 + load * 2 + reduce * 2
    assert [r["op"] for r in _rows(second)] == order
    stores = [r for r in _rows(second) if r["op"] == "store"]
    assert [r["base"] for r in stores] == [32 * i for i in range(8)]


def test_deadlocked_warp_specialize_is_recorded_not_hung():
    out = torch.zeros(4)
    traced = GluonTrace(gk.deadlocked_partitions)
    with pytest.raises(Exception, match="deadlock"):
        traced[(1,)](out)
    assert _partition_threads() == []
    rec = traced.records[-1]
    assert rec.status == "error"
    line = _line(gk._deadlocked_producer, "mbarrier.wait")  # the last partition to wait finds the deadlock
    assert rec.error.startswith("BarrierError: mbarrier.wait(phase=0) never completes")
    assert f"gluon_kernels.py:{line}:" in rec.error


def test_unsupported_construct_is_a_recorded_error(tmp_path):
    db = str(tmp_path / "h.db")
    x = torch.randn(128)
    out = torch.empty(128)
    with tilelens.record(db) as rec:
        with pytest.raises(Exception, match="buffer_load"):
            gk.uses_amd_buffer_load[(1,)](x, out, BLOCK=128, layout=gk.BLOCKED_1D)
        gk.vector_add[(1,)](x, x, out, 128, BLOCK=128, layout=gk.BLOCKED_1D)  # the program goes on
    assert torch.equal(out, x + x)
    assert rec.errors == 1 and len(rec.launch_ids) == 2
    with History.open(db) as h, h.session() as s:
        row = s.get(Launch, rec.launch_ids[0])
        status, error = row.status, row.error
    line = _line(gk.uses_amd_buffer_load, "x = gl.amd")
    assert status == "error"
    assert error == (
        "gl.amd.cdna3.buffer_load is not supported by the interpreter "
        f"(gluon_kernels.py:{line}: `x = gl.amd.cdna3.buffer_load(x_ptr, offs)`)"
    )


def test_gluon_launches_replay_bit_for_bit_on_the_cpu(tmp_path):
    db = str(tmp_path / "h.db")
    with tilelens.record(db) as rec:
        x, y = torch.randn(1000), torch.randn(1000)
        gk.vector_add[(4,)](x, y, torch.empty(1000), 1000, BLOCK=256, layout=gk.BLOCKED_1D)
        gk.row_sum_through_shared[(4,)](
            torch.randn(100, 64), torch.empty(100), 100, N=64, BM=32, layout=gk.BLOCKED_2D
        )
        a, b = torch.randn(64, 96), torch.randn(96, 32)
        gk.blocked_matmul[(2, 1)](
            a, b, torch.empty(64, 32), 64, 32, 96, BM=32, BN=32, BK=32, layout=gk.BLOCKED_2D
        )
        gk.shared_views[(1,)](torch.randn(16, 16), torch.empty(16 * 17), N=16, layout=gk.BLOCKED_2D)
        _a, _b, _c, (ad, bd, cd) = _tma_matmul()
        gk.tma_wgmma_matmul[(2, 1)](ad, bd, cd, 128, num_warps=4)
        xd = TensorDescriptor.from_tensor(
            torch.randn(256, 64), [32, 64], gk.nvmma_layout([32, 64], gl.float32)
        )
        gk.warp_specialized_row_sum[(1,)](xd, torch.empty(256), 8, STAGES=3, layout=gk.BLOCKED_2D)
        gk.autotuned_scale[lambda meta: (triton.cdiv(1000, meta["BLOCK"]),)](x, torch.empty(1000), 1000)
        ids = list(rec.launch_ids)
    assert len(ids) == 7 and rec.errors == 0
    with History.open(db) as h:
        results = [replay_launch(h, i) for i in ids]
    for r in results:
        assert r.outcome == "match", r.message
        assert r.trace_equal is True
        assert "bit-identical, access trace identical" in r.message


def test_triton_host_descriptor_arguments_record_and_replay(tmp_path):
    """Host TMA descriptors are recorded as their tensor plus the box (recording them used to raise)."""
    from triton.tools.tensor_descriptor import TensorDescriptor as TritonDescriptor

    from tests import kernels

    db = str(tmp_path / "h.db")
    x, y = torch.randn(64, 32), torch.zeros(64, 32)
    with tilelens.record(db) as rec:
        src, dst = TritonDescriptor.from_tensor(x, [16, 32]), TritonDescriptor.from_tensor(y, [16, 32])
        kernels.host_descriptor_copy[(4,)](src, dst, BM=16)
    assert torch.equal(x, y) and rec.errors == 0
    with History.open(db) as h:
        with h.session() as s:
            args = sorted(s.get(Launch, rec.launch_ids[0]).args, key=lambda a: a.position)
            kinds, desc = [a.kind for a in args[:2]], args[0].value["descriptor"]
        result = replay_launch(h, rec.launch_ids[0])
    assert kinds == ["tensor", "tensor"]
    assert (desc["kind"], desc["shape"], desc["block_shape"]) == ("triton", [64, 32], [16, 32])
    assert result.outcome == "match", result.message
    assert "2 tensors bit-identical, access trace identical" in result.message


def test_every_simulator_patch_is_removed_after_a_launch_even_a_failing_one():
    from tilelens.core import compat
    from tilelens.core.engine.gluon import language

    module = compat.interpreter_module
    watched = [(owner, name) for owner, name, _ in language.replacements()]
    watched += [(module, "interpreter_semantic"), (module, "_implicit_cvt"), (module, "_patch_lang")]
    watched += [(compat.ReduceOps, "apply"), (compat.ScanOps, "apply"), (module.GridExecutor, "__init__")]
    before = {(id(o), n): vars(o).get(n) for o, n in watched}
    x, out = torch.randn(128), torch.empty(128)
    GluonTrace(gk.vector_add)[(1,)](x, x, out, 128, BLOCK=128, layout=gk.BLOCKED_1D)
    with pytest.raises(Exception, match="buffer_load"):
        GluonTrace(gk.uses_amd_buffer_load)[(1,)](x, out, BLOCK=128, layout=gk.BLOCKED_1D)
    assert {(id(o), n): vars(o).get(n) for o, n in watched} == before
    assert language.ACTIVE.semantic is None
    with pytest.raises(ValueError, match="gluon.jit"):  # Gluon builtins are Gluon's own again
        gl.arange(0, 4)
