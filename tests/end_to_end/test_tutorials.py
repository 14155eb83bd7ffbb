"""Tutorial-style kernels (tests/tutorial_kernels.py) recorded on the CPU, replayed, checked against PyTorch."""

from __future__ import annotations

import pytest
import torch
import triton

import tilelens
from tests import tutorial_kernels as tk
from tests.end_to_end.test_liger import history_launches
from tilelens.replay import replay_launch
from tilelens.store import History


@pytest.fixture
def where(tmp_path):
    return {"db": str(tmp_path / "h.db"), "blobs": str(tmp_path / "blobs")}


def assert_recorded_and_replayed(where, kernels: list[str]) -> None:
    rows = history_launches(where)
    assert [(kernel, status, error) for _, kernel, status, error in rows] == [
        (k, "ok", None) for k in kernels
    ]
    with History.open(**where) as h:
        for launch_id, kernel, _, _ in rows:
            result = replay_launch(h, launch_id, device="cpu")
            assert result.outcome == "match", (kernel, result.message)


def test_fused_softmax(where):
    x = torch.randn(6, 100, generator=torch.Generator().manual_seed(0))
    out = torch.empty_like(x)
    with tilelens.record(**where):
        tk.fused_softmax[(6,)](out, x, x.stride(0), 100, BLOCK=128)
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-6, atol=1e-7)
    assert_recorded_and_replayed(where, ["fused_softmax"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_layer_norm_forward_and_backward_with_a_spin_lock(dtype, where):
    gen = torch.Generator().manual_seed(0)
    rows, cols = 8, 100
    x = torch.randn(rows, cols, generator=gen).to(dtype)
    w, b = torch.randn(cols, generator=gen).to(dtype), torch.randn(cols, generator=gen).to(dtype)
    dy = torch.randn(rows, cols, generator=gen).to(dtype)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    mean, rstd = torch.empty(rows), torch.empty(rows)
    dw, db, lock = torch.zeros(cols), torch.zeros(cols), torch.zeros(1, dtype=torch.int32)
    with tilelens.record(**where):
        tk.layer_norm_fwd[(rows,)](x, y, w, b, mean, rstd, cols, 1e-5, BLOCK=128)
        tk.layer_norm_bwd[(rows,)](dy, x, w, mean, rstd, dx, dw, db, lock, cols, BLOCK=128)
    x64, w64, b64 = (t.double().requires_grad_() for t in (x, w, b))
    y64 = torch.nn.functional.layer_norm(x64, (cols,), w64, b64, 1e-5)
    grads = torch.autograd.grad(y64, (x64, w64, b64), dy.double())
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-4}
    for got, want in zip((y, dx, dw, db), (y64, *grads)):
        torch.testing.assert_close(got.double(), want.detach(), **tol)
    assert lock.item() == 0
    assert_recorded_and_replayed(where, ["layer_norm_fwd", "layer_norm_bwd"])
    # tilelens check: every program's dw/db update runs under the one lock, so nothing races.
    with tilelens.open_query(**where) as q:
        (fwd, bwd) = tilelens.check_launches(q, sorted(s.id for s in q.launches()))
    assert (fwd.findings, fwd.synchronized, bwd.findings) == ([], [], [])
    assert sorted((s.kind, s.arg_name, s.elements.count, s.locks) for s in bwd.synchronized) == [
        (kind, arg, 100, ["lock_ptr[0]"])
        for kind, arg in [
            ("read-write", "db_ptr"),
            ("read-write", "dw_ptr"),
            ("write-write", "db_ptr"),
            ("write-write", "dw_ptr"),
        ]
    ]


def test_seeded_dropout_keeps_the_same_lanes_for_the_same_seed(where):
    n, p = 1000, 0.3
    x = torch.randn(n, generator=torch.Generator().manual_seed(0)) + 5.0  # nonzero, so kept lanes show
    first, second = torch.empty(n), torch.empty(n)
    with tilelens.record(**where):
        tk.seeded_dropout[(triton.cdiv(n, 256),)](x, first, n, p, 1234, BLOCK=256)
        tk.seeded_dropout[(triton.cdiv(n, 256),)](x, second, n, p, 1234, BLOCK=256)
    kept = first != 0
    assert torch.equal(first, second)
    assert 0.6 < kept.float().mean().item() < 0.8
    torch.testing.assert_close(first[kept], x[kept] / (1 - p))
    assert_recorded_and_replayed(where, ["seeded_dropout", "seeded_dropout"])


def test_autotuned_bf16_matmul_with_a_float_parameter(where):
    gen = torch.Generator().manual_seed(0)
    m, n, k = 48, 40, 72
    a = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    b = torch.randn(k, n, generator=gen).to(torch.bfloat16)
    c = torch.empty(m, n, dtype=torch.bfloat16)

    def grid(meta):
        return (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)

    with tilelens.record(**where):
        tk.matmul_leaky_relu[grid](a, b, c, m, n, k, 0.01)
    expected = torch.nn.functional.leaky_relu(a.float() @ b.float(), 0.01).to(torch.bfloat16)
    torch.testing.assert_close(c.float(), expected.float(), rtol=8e-3, atol=8e-3)
    assert_recorded_and_replayed(where, ["matmul_leaky_relu"])
