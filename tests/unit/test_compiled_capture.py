"""The fast path of a compiled launch (snapshots="none"): raw facts on the program's thread, records later."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import torch
import triton
import triton.language as tl

from tilelens.core.compiled.capture import describe_snapped, snap_arguments
from tilelens.core.compiled.writer.thread import BackgroundWriter
from tilelens.core.kernel.arguments import bind, describe_arguments, kernel_params
from tilelens.records import AutotuneEvent, KernelIdentity, LaunchRecord


@triton.jit
def many_kinds(
    x_ptr, y_ptr, alias_ptr, view, n, scale, flag, missing, BLOCK: tl.constexpr, MODE: tl.constexpr
):
    pass


def test_snapped_arguments_describe_exactly_like_describe_arguments() -> None:
    base = torch.arange(40, dtype=torch.float32)
    y = torch.zeros(3, 5, dtype=torch.bfloat16).t()  # non-contiguous
    alias = base[8:]  # same storage as x: one storage group
    wrapped = triton.reinterpret(torch.zeros(6, dtype=torch.int32), tl.float32)  # described at once
    args = (base, y, alias, wrapped, 7, 0.5, True, None)
    bound, _ = bind(kernel_params(many_kinds.fn), args, {"BLOCK": 16, "MODE": "fast", "num_warps": 2})
    params = kernel_params(many_kinds.fn)
    expected = describe_arguments(params, bound, snapshots=False)
    snapped = snap_arguments(params, bound)
    base.resize_(0)  # the program may free or reshape its tensors before the writer gets to them
    got = describe_snapped(params, snapped)
    assert [dataclasses.asdict(r) for r in got] == [dataclasses.asdict(r) for r in expected]
    assert [r.storage_group for r in got if r.kind == "tensor"] == [0, 1, 0, 2]
    assert got[5].value_type == "float" and got[6].value_type == "bool" and got[9].value == "fast"


def _identity() -> KernelIdentity:
    return KernelIdentity(
        module="m", qualname="k", file="m.py", def_line=1, source="", source_sha256="0" * 64, cache_key=None
    )


def test_writer_builds_records_on_its_thread_in_order_and_flush_waits_for_them() -> None:
    written: list[tuple[int, str]] = []
    events: list[tuple[str, int | None]] = []

    def write_launches(recs: list[LaunchRecord]) -> list[int]:
        ids = [len(written) + i + 1 for i in range(len(recs))]
        written.extend((i, threading.current_thread().name) for i in ids)
        return ids

    def write_event(event: AutotuneEvent, launch_id: int | None) -> None:
        events.append((event.tuning_key, launch_id))

    def make(i: int) -> Any:
        def build() -> LaunchRecord:
            built.append((i, threading.current_thread().name))
            return LaunchRecord(kernel=_identity(), grid=(i + 1, 1, 1), args=[])

        return build

    built: list[tuple[int, str]] = []
    writer = BackgroundWriter(write_launches, write_event)
    handles = [writer.submit_launch(None, None, make(i)) for i in range(1500)]
    writer.submit_event(
        AutotuneEvent(kernel=_identity(), tuning_key="key", configs=[], chosen={}), handles[-1]
    )
    writer.flush()
    assert [h.id for h in handles] == list(range(1, 1501))
    assert [i for i, _ in built] == list(range(1500))
    assert {name for _, name in built} == {"tilelens-writer"}
    assert [h.record.grid[0] for h in handles if h.record is not None] == list(range(1, 1501))
    assert events == [("key", 1500)]
    handles.append(writer.submit_launch(None, None, make(1500)))
    writer.close()  # drains what came after the flush
    assert handles[-1].id == 1501 and len(written) == 1501


def test_a_failing_build_is_counted_and_the_writer_goes_on() -> None:
    def bad() -> LaunchRecord:
        raise RuntimeError("cannot describe")

    writer = BackgroundWriter(lambda recs: list(range(1, len(recs) + 1)), lambda e, i: None)
    first = writer.submit_launch(None, None, bad)
    writer.flush()
    later = writer.submit_launch(
        None, None, lambda: LaunchRecord(kernel=_identity(), grid=(1, 1, 1), args=[])
    )
    writer.close()
    assert first.id is None and later.id == 1
    assert writer.failed_launches == 1 and isinstance(writer.failure, RuntimeError)
