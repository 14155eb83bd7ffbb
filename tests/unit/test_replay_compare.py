"""Replay's judges in isolation: bitwise and tolerance comparison, trace diffs, recorded values."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
import torch
import triton
import triton.language as tl

from tests import kernels
from tilelens.core.interpreted.trace import TritonTrace
from tilelens.records import KernelIdentity
from tilelens.replay.compare import Tolerance, compare_span, default_tolerance, uses_tf32_dot, view_index
from tilelens.replay.rebuild import decode_value
from tilelens.replay.result import ReplayFailure
from tilelens.replay.traces import first_difference, last_writer
from tilelens.store.read.launches import LaunchSpec


def _cmp(recorded, replayed, tolerance=None, shape=None, strides=None):
    shape = shape or (recorded.numel(),)
    strides = strides or (1,)
    return compare_span("out", 2, recorded, replayed, shape, strides, tolerance)


def test_bitwise_counts_signed_zeros_and_nan_payloads() -> None:
    a = torch.tensor([0.0, 1.0, float("nan")])
    assert _cmp(a, a.clone()).equal
    d = _cmp(a, torch.tensor([-0.0, 1.0, float("nan")]))
    assert not d.equal and d.mismatched == 1 and d.first_index == "[0]" and d.max_abs_err == 0
    other_nan = a.clone()
    other_nan.view(torch.int32)[2] = 0x7FC00001
    assert not _cmp(a, other_nan).equal
    assert _cmp(a, other_nan, Tolerance(0.0, 0.0)).equal  # NaN equals NaN within tolerances


def test_a_bits_only_difference_names_no_worst_element() -> None:
    """Signed zeros differ in bits but not in value: no worst element exists, and none is printed (was "at outNone")."""
    d = _cmp(torch.tensor([0.0, 1.0]), torch.tensor([-0.0, 1.0]))
    assert d.worst_index is None
    assert d.describe() == "out[0] differs (recorded 0, replayed -0; 1 of 2 elements, max abs err 0)"


def test_tolerance_reports_worst_and_first_elements() -> None:
    rec = torch.tensor([1.0, 2.0, 3.0, 4.0])
    rep = torch.tensor([1.0, 2.00001, 3.5, 4.0])
    d = _cmp(rec, rep, Tolerance(1e-4, 0.0))
    assert not d.equal and d.mismatched == 1 and d.first_index == "[2]"
    assert (
        d.max_abs_err == pytest.approx(0.5)
        and d.worst_index == "[2]"
        and d.max_rel_err == pytest.approx(0.5 / 3)
    )
    assert _cmp(rec, rep, Tolerance(0.6, 0.0)).equal
    one_nan = _cmp(rec, torch.tensor([1.0, 2.0, float("nan"), 4.0]), Tolerance(1.0, 1.0))
    assert not one_nan.equal and math.isinf(one_nan.max_abs_err)


def test_integers_stay_exact_under_tolerances() -> None:
    rec = torch.tensor([2**62, 5], dtype=torch.int64)
    rep = torch.tensor([2**62 + 1, 5], dtype=torch.int64)
    assert not _cmp(rec, rep, Tolerance(10.0, 1.0)).equal
    flags = torch.tensor([True, False])
    assert _cmp(flags, flags.clone()).equal and not _cmp(flags, ~flags).equal


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e5m2, torch.complex64])
def test_every_float_dtype_is_compared(dtype: torch.dtype) -> None:
    rec = torch.tensor([1.0, -2.0]).to(dtype)
    rep = torch.tensor([1.0, 6.0]).to(dtype)
    d = _cmp(rec, rep, default_tolerance(dtype, rec))
    assert not d.equal and d.first_index == "[1]" and d.max_abs_err == pytest.approx(8.0)
    assert _cmp(rec, rec.clone(), default_tolerance(dtype, rec)).equal


def test_view_indices_skip_the_gaps_between_rows() -> None:
    assert view_index(9, (3, 4), (8, 1)) == "[1, 1]"
    assert view_index(5, (3, 4), (8, 1)) == ".span[5]"
    assert view_index(6, (4, 3), (1, 4)) == "[2, 1]"  # a transposed view
    assert view_index(0, (), ()) == "[]"


def test_default_tolerances_follow_dtype_and_dots() -> None:
    rec = torch.full((4,), 50.0)
    assert default_tolerance(torch.float32, rec) == Tolerance(1e-5, 1e-5)
    assert default_tolerance(torch.int32, rec.int()) == Tolerance(0.0, 0.0)
    tf32 = default_tolerance(torch.float32, rec, "acc += tl.dot(a, b)")
    assert tf32 == Tolerance(pytest.approx(0.5), 1e-2)
    ieee = default_tolerance(torch.float32, rec, 'acc += tl.dot(a, b, input_precision="ieee")')
    assert ieee == Tolerance(pytest.approx(5e-4), 1e-5)
    assert default_tolerance(torch.float16, rec.half(), "tl.dot(a, b)").rtol == 2e-3
    assert uses_tf32_dot("tl.dot(a, b)") and not uses_tf32_dot("tl.dot(a, b, allow_tf32=False)")
    assert not uses_tf32_dot("x = dotted + 1")


def _launch() -> LaunchSpec:
    kernel = KernelIdentity("m", "k", "/f.py", 1, "def k(): pass", "0" * 64, None)
    return LaunchSpec(1, 1, kernel, (1, 1, 1), {}, "ok", None, "cpu", None, 0.0)


def test_recorded_values_decode_or_refuse() -> None:
    launch = _launch()
    assert decode_value(launch, "x", {"float": "inf"}) == math.inf
    assert math.isnan(decode_value(launch, "x", {"$float": "nan"}))
    assert decode_value(launch, "x", [1, [2, 3]]) == (1, (2, 3))
    assert decode_value(launch, "x", {"repr": "triton.language.float16"}) is tl.float16
    with pytest.raises(ReplayFailure, match="argument x was recorded only as <object at 0x1>"):
        decode_value(launch, "x", {"repr": "<object at 0x1>"})
    with pytest.raises(ReplayFailure):
        decode_value(launch, "x", {"repr": "triton.language.__class__"})


def test_recorded_values_use_the_documented_tags_and_old_tags_still_decode() -> None:
    """Scalars are stored with docs/sql.md's tags, the same as every other JSON value; older histories' untagged
    ``{"float": ...}``/``{"repr": ...}`` keep decoding."""
    from tilelens.core.kernel.arguments import jsonable
    from tilelens.store.files.jsonvalues import FLOAT_TAG, REPR_TAG, TYPE_TAG, to_json

    stored = jsonable([float("inf"), tl.float16, 2.5])
    assert stored[0] == {FLOAT_TAG: "inf"} == to_json(float("inf"))
    assert stored[1] == {TYPE_TAG: "triton.language.core.dtype", REPR_TAG: "triton.language.float16"}
    assert stored[2] == 2.5
    launch = _launch()
    assert decode_value(launch, "x", stored) == (math.inf, tl.float16, 2.5)
    assert decode_value(launch, "x", [{"float": "-inf"}, {"repr": "triton.language.float16"}]) == (
        -math.inf,
        tl.float16,
    )


def _trace(n: int = 1000, block: int = 256) -> pa.Table:
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    traced = TritonTrace(kernels.add_kernel, in_place=False)
    traced[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return traced.records[-1].trace


NAMES = {0: "x_ptr", 1: "y_ptr", 2: "out_ptr"}


def test_trace_diff_names_event_program_argument_and_field() -> None:
    trace = _trace()
    assert first_difference(trace, _trace(), NAMES) is None
    i = trace.column_names.index("base")
    changed = trace.set_column(i, "base", pa.array([0, 0, 0, 256, 7, 256, *([0] * 6)], pa.int64()))
    d = first_difference(trace, changed, NAMES)
    assert d is not None and d.row == 4 and d.field == "base"
    assert (d.program, d.event, d.op, d.arg) == ((1, 0, 0), 1, "load", "y_ptr")
    assert (d.recorded, d.replayed) == (256, 7)
    assert "event 1 of program (1, 0, 0) (load of y_ptr at line" in d.describe()


def test_trace_diff_when_one_trace_is_shorter() -> None:
    trace = _trace()
    d = first_difference(trace, trace.slice(0, 10), NAMES)
    assert d is not None and d.row == 10 and d.field == "events"
    assert (d.recorded, d.replayed) == ("12 events", "10 events")


def test_trace_diff_of_masks_names_the_lane() -> None:
    trace = _trace(n=1000)
    i = trace.column_names.index("mask")
    masks = trace.column("mask").to_pylist()
    masks[0] = bytes([0xFF] * 31 + [0xFE])  # lane 255 of program 0 switched off
    d = first_difference(trace, trace.set_column(i, "mask", pa.array(masks, pa.binary())), NAMES)
    assert d is not None and d.field == "mask" and d.recorded == "all lanes active"
    assert d.replayed == "255 lanes set, first differing lane 255"


def test_last_writer_finds_the_store_of_an_element() -> None:
    trace = _trace(n=1000, block=256)
    w = last_writer(trace, 2, 600)
    assert w is not None and (w.program, w.op, w.event) == ((2, 0, 0), "store", 2)
    assert last_writer(trace, 2, 1000) is None  # masked-off lane of the last program
    assert last_writer(trace, 0, 5) is None  # x is only loaded
