"""The Gluon simulator on its own: mbarriers, partition scheduling, shared views, recorded values."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from tilelens.core import compat
from tilelens.core.engine.gluon.barriers import Barrier, BarrierError
from tilelens.core.engine.gluon.executor import is_constexpr_annotation
from tilelens.core.engine.gluon.partitions import Scheduler
from tilelens.core.engine.gluon.shared import SharedMemory
from tilelens.core.kernel import descriptors, layouts
from tilelens.core.kernel.arguments import jsonable


def _partition_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tilelens-gluon-partition")]


def test_barrier_phase_completes_on_arrivals_and_transaction_bytes():
    bar = Barrier(count=2, pending=2)
    assert bar.completed(1) and not bar.completed(0)  # at init only the "previous" phase (parity 1) is done
    bar.expect(4096)  # one arrival, 4096 bytes outstanding
    bar.arrive()
    assert not bar.completed(0)  # arrivals complete, bytes not yet
    bar.complete_tx(4096)
    assert bar.completed(0) and not bar.completed(1)
    assert (bar.phase, bar.pending, bar.tx_bytes) == (1, 2, 0)


def test_barrier_copy_landing_before_expect_still_completes_once():
    bar = Barrier(count=1, pending=1)
    bar.complete_tx(128)  # a synchronous copy can finish before its expect
    assert bar.phase == 0
    bar.expect(128)
    assert bar.phase == 1


def _scheduler() -> Scheduler:
    return Scheduler(thread_init=lambda: None)


def test_scheduler_runs_partitions_in_order_and_switches_at_waits():
    log: list[str] = []
    flag = {"ready": False}
    sched = _scheduler()

    def default():
        log.append("default: wait")
        sched.wait_until(lambda: flag["ready"], "flag")
        log.append("default: go")
        return 42

    def worker():
        log.append("worker: set")
        flag["ready"] = True
        log.append("worker: done")

    assert sched.run([(default, 4), (worker, 1)]) == 42
    assert log == ["default: wait", "worker: set", "worker: done", "default: go"]


def test_scheduler_reports_a_deadlock_and_ends_every_thread():
    sched = _scheduler()

    def waits_forever():
        sched.wait_until(lambda: False, "mbarrier.wait(phase=0)")

    with pytest.raises(BarrierError, match="no partition of warp_specialize can go on"):
        sched.run([(waits_forever, 4), (waits_forever, 1)])
    assert _partition_threads() == []


def test_scheduler_hands_a_partition_error_to_the_caller():
    sched = _scheduler()

    def default():
        sched.wait_until(lambda: False, "never")

    def worker():
        raise ZeroDivisionError("in the worker")

    with pytest.raises(ZeroDivisionError, match="in the worker"):
        sched.run([(default, 4), (worker, 1)])


def test_shared_views_alias_one_allocation_at_aligned_addresses():
    mem = SharedMemory((0, 0, 0))
    bar = mem.allocate(compat.tl.int64, [1])
    tile = mem.allocate(compat.tl.float32, [4, 8])
    assert (bar.address, tile.address) == (0, 16)
    tile.array[...] = np.arange(32, dtype=np.float32).reshape(4, 8)
    sub = tile.sub([1, 2], [2, 4])
    assert sub.array.tolist() == [[10, 11, 12, 13], [18, 19, 20, 21]]
    assert sub.addresses().tolist()[0] == [16 + 4 * 10 + 4 * i for i in range(4)]
    t = tile.permute([1, 0])
    assert t.array[3, 1] == 11 and t.addresses()[3, 1] == 16 + 4 * 11
    bits = tile.reinterpret(compat.tl.int32, [32])
    assert bits.array[5] == np.float32(5).view(np.int32)
    bits.array[0] = np.float32(-1).view(np.int32)
    assert tile.array[0, 0] == -1  # the same bytes
    with pytest.raises(IndexError):
        tile.index(4)
    with pytest.raises(ValueError):
        tile.reinterpret(compat.tl.int64, [32])  # 256 bytes from a 128-byte allocation


@pytest.mark.parametrize(
    "layout",
    [
        gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0]),
        gl.SliceLayout(1, gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])),
        gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2),
        gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16]),
        gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
        gl.DotOperandLayout(0, gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0]), 0),
        mbarrier.MBarrierLayout(),
    ],
)
def test_layouts_round_trip_through_their_recorded_json(layout):
    recorded = jsonable(layout)
    assert recorded["gluon_layout"] == type(layout).__name__
    rebuilt = layouts.decode(recorded)
    assert type(rebuilt) is type(layout) and rebuilt == layout


def test_layout_decoding_constructs_nothing_outside_gluon():
    with pytest.raises(layouts.LayoutDecodeError):
        layouts.decode({"gluon_layout": "system", "module": "os", "fields": {}})
    with pytest.raises(layouts.LayoutDecodeError):
        layouts.decode({"gluon_layout": "Popen", "module": "triton.experimental.gluon.language.subprocess"})
    with pytest.raises(layouts.LayoutDecodeError):  # a function of a Gluon module is not a layout class
        layouts.decode({"gluon_layout": "arange", "module": "triton.experimental.gluon.language._core"})


def test_host_descriptor_is_recorded_as_its_tensor_and_rebuilt_around_another():
    x = torch.randn(64, 32)
    layout = gl.NVMMASharedLayout.get_default_for([16, 32], gl.float32)
    desc = TensorDescriptor(x, [48, 32], [32, 1], [16, 32], layout, padding="nan")
    value = descriptors.describe(desc, jsonable)
    assert value["descriptor"]["kind"] == "gluon"
    assert value["descriptor"]["shape"] == [48, 32] and value["descriptor"]["padding"] == "nan"
    y = torch.zeros(64, 32)
    rebuilt = descriptors.rebuild(y, value["descriptor"])
    assert type(rebuilt) is TensorDescriptor and rebuilt.base is y
    assert (rebuilt.shape, rebuilt.strides, rebuilt.block_shape) == ([48, 32], [32, 1], [16, 32])
    assert rebuilt.layout == layout and rebuilt.padding == "nan"


def test_gluon_constexpr_annotations_are_recognised():
    assert all(
        is_constexpr_annotation(a)
        for a in ("gl.constexpr", "ttgl.constexpr", "tl.constexpr", compat.tl.constexpr)
    )
    assert not any(is_constexpr_annotation(a) for a in ("int", None, "gl.tensor"))


def test_host_descriptor_tensors_go_through_the_interpreters_host_copies():
    """A CUDA tensor inside a Gluon descriptor is copied to the host and back like any tensor argument."""
    from tilelens.core.engine.gluon import descriptors as host

    x = torch.randn(32, 32)
    desc = TensorDescriptor.from_tensor(
        x, [16, 32], gl.NVMMASharedLayout.get_default_for([16, 32], gl.float32)
    )
    seen: dict[str, object] = {}

    def init_args_hst(self, args, kwargs):  # stands in for the interpreter's: a copy of every tensor
        seen["args"] = args
        return [a.clone() if isinstance(a, torch.Tensor) else a for a in args], dict(kwargs)

    args_hst, _ = host.init_args_hst(init_args_hst)(None, [desc, 3], {})
    assert seen["args"][0] is x
    copy = args_hst[0]
    assert isinstance(copy, TensorDescriptor) and copy.base is not x and torch.equal(copy.base, x)
    assert (copy.block_shape, copy.layout) == (desc.block_shape, desc.layout) and desc.base is x

    def restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        seen["dev"], seen["hst"] = args_dev, args_hst

    host.restore_args_dev(restore_args_dev)(None, [desc, 3], args_hst, {}, {})
    assert seen["dev"][0] is x and seen["hst"][0] is copy.base


def test_scheduler_reports_a_partition_left_waiting_when_the_others_end():
    sched = _scheduler()

    flag = {"set": False}

    def default():
        sched.wait_until(lambda: flag["set"], "first")
        return "done"  # ends without arriving on what the worker waits for now

    def worker():
        flag["set"] = True
        sched.wait_until(lambda: False, "mbarrier.wait(phase=1)")

    with pytest.raises(BarrierError, match=r"mbarrier.wait\(phase=1\) never completes: no partition"):
        sched.run([(default, 4), (worker, 1)])
    assert _partition_threads() == []
