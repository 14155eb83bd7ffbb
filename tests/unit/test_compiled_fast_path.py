"""The program-thread fast path of a compiled recording (``snapshots="none"``): what it stores is exactly what
the general path stores.

With Triton's runner the router reads the arguments Triton bound, through the grid it hands Triton
(``compiled_frames.GridProbe``), instead of binding them again; tuning keys of positional calls take a planned path
(``compat.autotune_key_positional``); arguments are snapped by a per-kernel plan (``capture.snap_planned``).
Each is checked against the code it stands in for, row by row and value by value.
"""

from __future__ import annotations

import marshal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from sqlalchemy import select
from triton import knobs

import tilelens
from tilelens.core import compat
from tilelens.core.compiled.capture import SnapPlan, snap_arguments, snap_planned, snapped_device
from tilelens.core.kernel.arguments import bind, kernel_params
from tilelens.store import History
from tilelens.store.sql.models import Launch

from .test_compiled_capture import many_kinds
from .test_compiled_recording import StandIn, failing_kernel, scale_kernel
from .test_writer_process import _rows

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.autotune(
        configs=[triton.Config({"BLOCK": 16}, num_warps=2), triton.Config({"BLOCK": 32})], key=["n"]
    )
    @triton.heuristics({"EVEN": lambda a: a["n"] % 2 == 0})
    @triton.jit
    def tuned_add(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr, EVEN: tl.constexpr, SHIFT: tl.constexpr = 1):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha + SHIFT, mask=mask)


class TritonLike(StandIn):
    """The stand-in, calling a callable grid as Triton's ``JITFunction.run`` does: once, with every parameter
    bound (defaults applied), before the launch; the launch then runs on the grid that call returned."""

    binds_like_triton = True

    def __init__(self) -> None:
        super().__init__()
        self.probed = 0

    def __call__(self, jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
        bound, _ = bind(kernel_params(jit.fn), args, kwargs)
        if callable(grid):
            self.probed += type(grid).__name__ == "GridProbe"
            grid = grid(bound)
        return super().__call__(jit, args, grid, kwargs)


def _program() -> tuple[list[torch.Tensor], Any]:
    x = torch.arange(40, dtype=torch.float32)
    # The tuning already made (the stand-in cannot benchmark): every launch below finds it.
    tuned_add.cache.clear()
    tuned_add.cache[(40, "torch.float32", "torch.float32")] = tuned_add.configs[0]
    outs = [torch.zeros(40) for _ in range(4)]

    def body() -> None:
        scale_kernel[(3,)](x, outs[0], 40, 2.5, BLOCK=16, num_warps=2)
        tuned_add[lambda m: (triton.cdiv(40, m["BLOCK"]),)](x, outs[1], 40, 0.5)
        tuned_add[(2,)](x, outs[2], 40, 3, SHIFT=7)
        scale_kernel[lambda m: (m["n"] // m["BLOCK"] + 1, 1)](x, outs[3], n=40, factor=-1.0, BLOCK=16)
        with pytest.raises(Exception):  # noqa: B017 - whatever the launch raises, unchanged
            failing_kernel[(1,)](x, BLOCK=3)

    return outs, body


def test_the_grid_probe_path_stores_exactly_what_binding_again_stores(tmp_path: Path) -> None:
    results = {}
    runners = {"bind": StandIn(), "probe": TritonLike()}
    for name, runner in runners.items():
        outs, body = _program()
        rec = tilelens.Recording(
            str(tmp_path / f"{name}.db"), tmp_path / name, backend="compiled", snapshots="none", runner=runner
        )
        with rec:
            body()
        results[name] = (outs, _rows(tmp_path / f"{name}.db", tmp_path / name))
        with History.open(str(tmp_path / f"{name}.db"), tmp_path / name) as h, h.session() as s:
            errors = s.execute(select(Launch.error).order_by(Launch.seq)).scalars().all()
        results[name] += (errors,)
    assert runners["probe"].probed == 5  # every launch's grid went through the probe (the tuple grids too)
    (b_outs, b_rows, b_errors), (p_outs, p_rows, p_errors) = results["bind"], results["probe"]
    assert all(torch.equal(b, p) for b, p in zip(b_outs, p_outs))
    assert torch.equal(p_outs[0][:40], torch.arange(40, dtype=torch.float32) * 2.5)
    assert p_rows == b_rows and p_errors == b_errors
    assert len(p_rows) == 5 and p_errors[:4] == [None] * 4 and p_errors[4]
    seq, qualname, grid, status, backend, device, config, key, args = p_rows[1]
    assert (qualname, grid, status, backend, device) == ("tuned_add", (3, 1, 1), "ok", "compiled", "cpu")
    assert key == "(40, 'torch.float32', 'torch.float32')"
    assert config["constexprs"] == {"BLOCK": 16, "EVEN": True, "SHIFT": 1}
    assert config["heuristics"] == {"EVEN": True}
    assert config["autotune"]["chosen"]["kwargs"] == {"BLOCK": 16}
    assert config["options"]["num_warps"] == 2
    assert [(a[1], a[2], a[7], a[8]) for a in args] == [
        ("x_ptr", "tensor", None, None),
        ("y_ptr", "tensor", None, None),
        ("n", "scalar", 40, "int"),
        ("alpha", "scalar", 0.5, "float"),
        ("BLOCK", "constexpr", 16, "int"),
        ("EVEN", "constexpr", True, "bool"),
        ("SHIFT", "constexpr", 1, "int"),
    ]
    assert p_rows[2][2] == (2, 1, 1) and p_rows[2][6]["constexprs"]["SHIFT"] == 7
    assert p_rows[2][8][3][7:9] == (3, "int")  # alpha=3 stays an int
    assert p_rows[3][2] == (3, 1, 1) and p_rows[0][6]["options"] == {"num_warps": 2}


def test_positional_tuning_keys_equal_tritons() -> None:
    class Tuner:
        arg_names = ["a", "b", "n", "m", "flag", "extra"]
        keys = ["m", "n", "missing", "extra"]

    bf = torch.zeros(2, dtype=torch.bfloat16)
    param = torch.nn.Parameter(torch.zeros(2))
    calls: list[tuple[Any, ...]] = [
        (bf, torch.zeros(3, dtype=torch.int64), 4, 5, True, None),
        (param, bf, 4.5, 7, False, "x"),
        (bf, np.float32(2.0), 1, 2),  # a numpy scalar has a dtype
        (bf, bf, 1, 2, True, 3, "beyond arg_names", torch.zeros(1)),
        (bf,),
        (),
    ]
    plan = compat.autotune_key_plan(Tuner)
    assert plan == (3, 2, 5)
    for args in calls:
        assert compat.autotune_key_positional(plan, Tuner.arg_names, args) == compat.autotune_key(
            Tuner, args, {}
        )
    assert compat.autotune_key_positional(plan, Tuner.arg_names, calls[0]) == (
        5,
        4,
        None,
        "torch.bfloat16",
        "torch.int64",
    )


def test_planned_snapping_equals_snap_arguments() -> None:
    base = torch.arange(40, dtype=torch.float32)
    y = torch.zeros(3, 5, dtype=torch.bfloat16).t()
    wrapped = triton.reinterpret(torch.zeros(6, dtype=torch.int32), tl.float32)
    params = kernel_params(many_kinds.fn)
    plan = SnapPlan(params)
    calls = [
        ((base, y, base[8:], wrapped, 7, 0.5, True, None), {"BLOCK": 16, "MODE": "fast"}, 1),
        ((None, base, y, 3, 2**40, -1.0, False, base), {"BLOCK": 16, "MODE": "fast"}, 0),
        # a str where a runtime value goes, a tensor and a dtype where constexprs go: described at once
        ((base, y, "text", 3, 1, 1.0, False, None), {"BLOCK": y, "MODE": tl.float32}, 3),
    ]
    for args, constexprs, described_at_once in calls:
        bound, _ = bind(params, args, constexprs)
        (got, device), expected = snap_planned(plan, params, bound), snap_arguments(params, bound)
        assert device == snapped_device(expected) == "cpu"
        assert len(got) == len(expected) == 10
        described = 0
        for g, e in zip(got, expected):
            assert type(g) is type(e)
            described += type(e) is dict  # described at once, as plain fields
            assert g == e
        assert described == described_at_once  # e.g. the reinterpret wrapper (MODE="fast" stays plain)
        marshal.dumps(got)  # plain values only: what the writer process receives


with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def moded(x_ptr, y_ptr, n, MODE: tl.constexpr, DT: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n).to(DT)
        if MODE == "double":
            x = x * 2
        tl.store(y_ptr + offs, x, mask=offs < n)


def test_constexpr_strings_and_objects_reach_the_writer_process(tmp_path: Path) -> None:
    """Liger's cross entropy passes ``reduction="mean"`` as a constexpr: such launches were snapped with an
    ``ArgumentRecord`` inside, which marshal refused, and the writer process lost them. Every launch is written,
    with the arguments the snapshot path describes at launch time."""
    x = torch.arange(8, dtype=torch.float32)
    rows = {}
    for mode in ("none", "all"):
        ys = [torch.zeros(8) for _ in range(3)]
        db, blobs = tmp_path / f"{mode}.db", tmp_path / f"{mode}-b"
        rec = tilelens.Recording(
            str(db), blobs, backend="compiled", snapshots=mode, runner=TritonLike(), writer="auto"
        )
        with rec:
            for y, m in zip(ys, ("double", "same", "double")):
                moded[(1,)](x, y, 8, MODE=m, DT=tl.float32, BLOCK=8)
        assert rec.write_failure is None and len(rec.launch_ids) == 3
        assert torch.equal(ys[0], x * 2) and torch.equal(ys[1], x)
        rows[mode] = [(*r[:-1], [a[:-1] for a in r[-1]]) for r in _rows(db, blobs)]
    assert rows["none"] == rows["all"]
    assert [r[-1][3][7] for r in rows["none"]] == ["double", "same", "double"]
    assert rows["none"][0][-1][4][2] == "constexpr" and rows["none"][0][-1][4][7] == rows["all"][0][-1][4][7]
