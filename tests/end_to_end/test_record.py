"""tilelens.record(): every launch recorded and persisted; Triton left exactly as it was."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from sqlalchemy import select
from triton import knobs

import tilelens
from tests import kernels
from tilelens.core import compat
from tilelens.store import History
from tilelens.store.sql.models import AutotuneEventRow, Launch, LaunchArg

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def where(tmp_path):
    return {"db": str(tmp_path / "h.db"), "blobs": str(tmp_path / "blobs")}


def launches(where):
    with History.open(**where) as h, h.session() as s:
        rows = s.scalars(select(Launch).order_by(Launch.id)).all()
        return [
            {
                "kernel": r.kernel.qualname,
                "seq": r.seq,
                "status": r.status,
                "role": r.role,
                "grid": (r.grid_x, r.grid_y, r.grid_z),
                "config": r.config,
                "load_lanes": r.load_lanes,
                "store_lanes": r.store_lanes,
                "oob_lanes": r.oob_lanes,
                "error": r.error,
                "tuning_key": r.tuning_key,
            }
            for r in rows
        ]


def _triton_state():
    state = {
        "JITFunction.__call__": vars(compat.JITFunction)["__call__"],
        "JITFunction.run": vars(compat.JITFunction)["run"],
        "InterpretedFunction.run": vars(compat.InterpretedFunction)["run"],
        "Autotuner.run": vars(compat.Autotuner)["run"],
        "Heuristics.run": vars(compat.Heuristics)["run"],
        "interpret": knobs.runtime.interpret,
    }
    for name in compat.ACCESS_METHODS:
        state[f"InterpreterBuilder.{name}"] = vars(compat.InterpreterBuilder)[name]
    # The semantic fixes (tilelens.core.engine.semantics) patch builder methods, reductions, scans and two functions
    # of the interpreter module.
    for cls in (compat.InterpreterBuilder, compat.ReduceOps, compat.ScanOps):
        state[f"{cls.__name__} vars"] = dict(vars(cls))
    for name in ("_implicit_cvt", "_patch_lang", compat.PATCH_LANG_TENSOR):
        state[f"interpreter.{name}"] = vars(compat.interpreter_module)[name]
    for ns in compat.LANG_NAMESPACES:
        state[repr(ns)] = dict(vars(ns))
    return state


def test_record_captures_every_launch(where):
    n = 1000
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    with tilelens.record(**where, tag="unit") as rec:
        kernels.add_kernel[(4,)](x, y, out, n, BLOCK=256)
        with knobs.runtime.scope():
            knobs.runtime.interpret = False

            @triton.jit
            def late_kernel(x_ptr, n, BLOCK: tl.constexpr):  # decorated inside the block
                offs = tl.arange(0, BLOCK)
                tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

        late_kernel[(1,)](out, 10, BLOCK=16)
    assert torch.equal(out[10:], (x + y)[10:]) and torch.equal(out[:10], (x + y)[:10] + 1)
    rows = launches(where)
    late = "test_record_captures_every_launch.<locals>.late_kernel"
    assert [(r["kernel"], r["seq"], r["status"]) for r in rows] == [("add_kernel", 0, "ok"), (late, 1, "ok")]
    assert rows[0]["load_lanes"] == 2 * n and rows[0]["store_lanes"] == n and rows[0]["grid"] == (4, 1, 1)
    assert rows[1]["load_lanes"] == 10 and rows[1]["store_lanes"] == 10
    assert rec.launches_per_kernel == {"tests.kernels.add_kernel": 1, f"{__name__}.{late}": 1}


def test_record_restores_triton_exactly_even_on_error(where):
    kernel = kernels.make_autotuned()
    user_dict = dict(vars(kernel))
    heur_dict = dict(vars(kernel.fn))
    before = _triton_state()
    x, out = torch.randn(100), torch.empty(100)
    with pytest.raises(RuntimeError, match="boom"), tilelens.record(**where):
        assert vars(compat.JITFunction)["run"] is not before["JITFunction.run"]
        kernel[kernels.autotuned_grid(100)](x, out, 100)
        assert kernel.best_config.kwargs == {"BLOCK": 128}  # programs read it after a launch
        raise RuntimeError("boom")
    after = _triton_state()
    assert after.keys() == before.keys()
    for key in before:
        assert after[key] == before[key], key
    assert vars(kernel) == user_dict and vars(kernel.fn) == heur_dict
    assert kernel.cache == {}  # dummy tuning choices never flow back into the user's autotuner
    assert isinstance(kernel.fn.fn, compat.JITFunction)
    with History.open(**where) as h, h.session() as s:
        from tilelens.store.sql.models import Run

        assert s.scalars(select(Run.status)).all() == ["failed"]


STOCK_MATMUL = """
import hashlib, torch
from triton.runtime import interpreter
from triton.runtime.interpreter import InterpretedFunction
from tests import kernels
from tilelens.core import compat
if compat.INDEX_NEEDS_SQUEEZE:  # 3.6 cannot run range(0, K, BK) with numpy >= 2.4: only 3.7's fix, written anew
    stock_patch = interpreter._patch_lang_tensor
    def patch_lang_tensor(tensor, scope):
        stock_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))
    interpreter._patch_lang_tensor = patch_lang_tensor
torch.manual_seed(0)
a, b, c = torch.randn(64, 64), torch.randn(64, 64), torch.empty(64, 64)
InterpretedFunction(kernels.matmul_kernel.fn)[(2, 2)](a, b, c, 64, 64, 64, BM=32, BN=32, BK=32)
print(hashlib.sha256(c.numpy().tobytes()).hexdigest())
"""


def test_recorded_launch_is_bit_identical_to_stock_interpreter(where):
    # The stock interpreter needs TRITON_INTERPRET=1 from import on (its tl helpers must be interpreted),
    # so the reference runs in its own process.
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    stock = subprocess.run(
        [sys.executable, "-c", STOCK_MATMUL], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    torch.manual_seed(0)
    a, b, c = torch.randn(64, 64), torch.randn(64, 64), torch.empty(64, 64)
    with tilelens.record(**where):
        kernels.matmul_kernel[(2, 2)](a, b, c, 64, 64, 64, BM=32, BN=32, BK=32)
    assert hashlib.sha256(c.numpy().tobytes()).hexdigest() == stock
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


def test_failing_launch_is_recorded_and_its_exception_reaches_the_user(where):
    x = torch.randn(8)
    with tilelens.record(**where), pytest.raises(compat.InterpreterError) as err:
        kernels.failing_kernel[(1,)](x, 8, BLOCK=8)
    assert "not_a_method" in str(err.value)  # the stock interpreter's own error, unchanged
    (row,) = launches(where)
    assert row["status"] == "error" and "not_a_method" in row["error"]
    assert row["load_lanes"] == 8  # the trace up to the failure is kept


def test_autotune_first_policy_records_the_chosen_config(where):
    kernel = kernels.make_autotuned()
    x, out = torch.randn(1000), torch.empty(1000)
    with tilelens.record(**where):
        kernel[kernels.autotuned_grid(1000)](x, out, 1000)
        kernel[kernels.autotuned_grid(1000)](x, out, 1000)
    assert torch.equal(out, x * 2)
    rows = launches(where)
    assert [r["role"] for r in rows] == ["launch", "launch"]
    assert rows[0]["config"]["autotune"]["chosen"] == {
        "kwargs": {"BLOCK": 128},
        "num_warps": 4,
        "num_stages": 3,
        "num_ctas": 1,
    }
    assert rows[0]["config"]["heuristics"] == {"EVEN": False}
    assert rows[0]["tuning_key"] == "(1000, 'torch.float32', 'torch.float32')"
    with History.open(**where) as h, h.session() as s:
        events = s.scalars(select(AutotuneEventRow)).all()
        assert len(events) == 1  # the second launch hit the autotuner's cache
        assert events[0].timings is None
        assert [c["kwargs"] for c in events[0].configs] == [{"BLOCK": 128}, {"BLOCK": 64}]
        assert events[0].launch_id == s.scalars(select(Launch.id).order_by(Launch.id)).first()


def test_autotune_all_policy_records_every_trial(where):
    kernel = kernels.make_autotuned()
    x, out = torch.randn(1000), torch.empty(1000)
    with tilelens.record(**where, autotune="all"):
        kernel[kernels.autotuned_grid(1000)](x, out, 1000)
    assert torch.equal(out, x * 2)
    rows = launches(where)
    assert [r["role"] for r in rows] == ["autotune-trial", "autotune-trial", "launch"]
    assert [r["config"]["constexprs"]["BLOCK"] for r in rows] == [128, 64, 128]
    assert [r["grid"][0] for r in rows] == [8, 16, 8]


def test_kernel_decorated_in_interpreter_mode_is_recorded(where):
    with knobs.runtime.scope():
        knobs.runtime.interpret = True

        @triton.jit
        def interp_kernel(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 3)

    assert isinstance(interp_kernel, compat.InterpretedFunction)
    x = torch.ones(16)
    with tilelens.record(**where):
        interp_kernel[(1,)](x, BLOCK=16)
    assert torch.equal(x, torch.full((16,), 3.0))
    (row,) = launches(where)
    assert row["kernel"].endswith("interp_kernel") and row["load_lanes"] == 16


def test_snapshots_round_trip_and_unchanged_tensors_share_a_blob(where):
    n = 100
    x, y, out = torch.randn(n), torch.randn(n), torch.zeros(n)
    x0 = x.clone()
    with tilelens.record(**where):
        kernels.add_kernel[(1,)](x, y, out, n, BLOCK=128)
    with History.open(**where) as h, h.session() as s:
        args = s.scalars(select(LaunchArg).order_by(LaunchArg.position)).all()
        assert [a.kind for a in args] == ["tensor", "tensor", "tensor", "scalar", "constexpr"]
        assert args[0].after_blob == args[0].before_blob  # x unchanged: stored once
        assert args[2].after_blob != args[2].before_blob
        assert torch.equal(h.blobs.get_tensor(args[0].before_blob), x0)
        assert torch.equal(h.blobs.get_tensor(args[2].before_blob), torch.zeros(n))
        assert torch.equal(h.blobs.get_tensor(args[2].after_blob), x + y)
        assert args[3].value == n and args[4].value == 128
