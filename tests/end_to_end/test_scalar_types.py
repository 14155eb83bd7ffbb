"""Scalars replay with the Python type they were recorded with (issue 15, point 4).

SQLite gives the JSON text ``1.0`` of a NUMERIC-affinity column back as the integer 1; compiled Triton then
specializes that int as a constant and ``x.to(tl.float32)`` fails to compile (Liger SwiGLU's
``gate_multiplier`` on cuda:0). The launch below makes the interpreter show which type it saw: it stores 1
when the scalar arrived as a float, 0 when it arrived as an int.
"""

from __future__ import annotations

from pathlib import Path

import torch
import triton
import triton.language as tl
from triton import knobs

import tilelens
from tilelens.core.kernel.arguments import kernel_params, scalar_type
from tilelens.replay import replay_launch
from tilelens.replay.rebuild import rebuild_arguments, typed_value
from tilelens.store import History
from tilelens.store.read.launches import load_launch

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def scalar_kind_kernel(out_ptr, scale, count, flag: tl.constexpr, ratio: tl.constexpr):
        # 1.0 for a float scale, 0.0 for an int one: the replay must see the type the launch saw.
        is_float = scale.dtype == tl.float32
        tl.store(out_ptr, tl.where(is_float, 1.0, 0.0) + scale.to(tl.float32) * 0.0)
        tl.store(out_ptr + 1, count.to(tl.float32))
        tl.store(out_ptr + 2, ratio * 1.0)

    @triton.jit
    def annotated_kernel(out_ptr, x: tl.float32, n: tl.int64):
        tl.store(out_ptr, x)


def _record(tmp_path: Path) -> tuple[History, int]:
    out = torch.zeros(3)
    with tilelens.record(db=str(tmp_path / "h.db"), blobs=tmp_path / "b") as rec:
        scalar_kind_kernel[(1,)](out, 1.0, 3, True, 2.0)
    assert out.tolist() == [1.0, 3.0, 2.0]
    return History.open(str(tmp_path / "h.db"), tmp_path / "b"), rec.launch_ids[0]


def test_float_scalar_equal_to_one_is_rebuilt_as_a_float(tmp_path: Path) -> None:
    history, launch_id = _record(tmp_path)
    with history:
        spec = load_launch(history, launch_id)
        types = {a.name: a.value_type for a in spec.args}
        assert types == {"out_ptr": None, "scale": "float", "count": "int", "flag": "bool", "ratio": "float"}
        rebuilt = rebuild_arguments(history.blobs, spec, torch.device("cpu")).kwargs
        assert type(rebuilt["scale"]) is float and rebuilt["scale"] == 1.0
        assert type(rebuilt["count"]) is int and rebuilt["count"] == 3
        assert type(rebuilt["ratio"]) is float and rebuilt["ratio"] == 2.0
        assert rebuilt["flag"] is True


def test_replay_sees_the_float_the_launch_saw(tmp_path: Path) -> None:
    history, launch_id = _record(tmp_path)
    with history:
        result = replay_launch(history, launch_id, device="cpu")
        assert result.outcome == "match", result.message


def test_typed_value_keeps_types_and_leaves_untyped_values_alone() -> None:
    assert type(typed_value(1, "float")) is float
    assert type(typed_value(1, "float:fp32")) is float
    assert type(typed_value(2.0, "int")) is int
    assert typed_value(1, "bool") is True
    assert type(typed_value(1, None)) is int  # before migration 0012: as stored
    assert typed_value("x", "float") == "x"
    assert typed_value(2.5, "int") == 2.5  # not an int: left alone rather than truncated


def test_annotated_parameters_keep_their_triton_type() -> None:
    params = kernel_params(annotated_kernel.fn)
    assert [p.triton_type for p in params] == [None, "float32", "int64"]
    assert scalar_type(1.0, params[1]) == "float:float32"
    assert scalar_type(7, params[2]) == "int:int64"
    assert scalar_type("text", params[1]) is None
