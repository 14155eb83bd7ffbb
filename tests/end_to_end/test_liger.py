"""Liger Kernel's Triton ops recorded on the CPU, replayed, and checked against PyTorch references.

Liger Kernel (installed by the ``dev`` extra) is a real library of kernels written for GPUs; its SwiGLU, GEGLU,
RMSNorm, LayerNorm and KL-divergence kernels stop in Triton's stock interpreter (float scalar parameters,
libdevice calls). Each test runs one op's forward and backward inside ``tilelens.record()``, compares the
outputs and gradients with a float64 PyTorch computation, checks that the history holds exactly the expected
kernels with status ``ok``, and replays every recorded launch on the CPU (bit for bit, access trace included).

References are computed before the op runs: several Liger backward passes write gradients into their inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import triton
from liger_kernel import ops as L
from sqlalchemy import select

import tilelens
from tilelens.replay import replay_launch
from tilelens.store import History
from tilelens.store.sql.models import Launch

BF16 = torch.bfloat16
F32 = torch.float32


@dataclass
class Case:
    """One op: its inputs (tensors that need gradients have requires_grad), the op, and its reference."""

    inputs: tuple[Any, ...]
    op: Callable[..., Any]
    ref: Callable[..., Any] | None
    kernels: set[str]
    rtol: float | None = None
    atol: float | None = None


def rand(*shape: int, dtype: torch.dtype = F32, grad: bool = True, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).to(dtype).requires_grad_(grad)


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return value if isinstance(value, tuple) else (value,)


def _reference_copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().double().requires_grad_(value.requires_grad)
    if isinstance(value, torch.Tensor):
        return value.clone()
    return value


def history_launches(where: dict[str, str]) -> list[tuple[int, str, str, str | None]]:
    with History.open(**where) as h, h.session() as s:
        rows = s.scalars(select(Launch).order_by(Launch.id)).all()
        return [(r.id, r.kernel.qualname, r.status, r.error) for r in rows]


def run_case(case: Case, where: dict[str, str], *, replay: bool = True) -> None:
    floats = [t.dtype for t in case.inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
    dtype = floats[0] if floats else F32
    rtol = case.rtol if case.rtol is not None else (3e-2 if dtype == BF16 else 1e-4)
    atol = case.atol if case.atol is not None else (3e-2 if dtype == BF16 else 1e-5)
    wants_grad = [t for t in case.inputs if isinstance(t, torch.Tensor) and t.requires_grad]

    expected = expected_grads = None
    if case.ref is not None:
        ref_inputs = [_reference_copy(t) for t in case.inputs]
        expected = _as_tuple(case.ref(*ref_inputs))
        ref_wants = [t for t in ref_inputs if isinstance(t, torch.Tensor) and t.requires_grad]

    gen = torch.Generator().manual_seed(1)
    with tilelens.record(**where):
        outputs = _as_tuple(case.op(*case.inputs))
        upstream = [torch.randn(o.shape, generator=gen).to(o.dtype) for o in outputs]
        # Clones: in-place backward passes (RMSNorm's default) overwrite the upstream gradient.
        passed = [u.clone() for u in upstream]
        grads = torch.autograd.grad(outputs, wants_grad, passed, allow_unused=True) if wants_grad else ()

    if case.ref is not None:
        assert len(outputs) == len(expected)
        for got, want in zip(outputs, expected):
            torch.testing.assert_close(got.double(), want.detach().double(), rtol=rtol, atol=atol)
        if ref_wants:
            ref_outs = [e for e in expected if isinstance(e, torch.Tensor) and e.requires_grad]
            ref_up = [u.double() for u, e in zip(upstream, expected) if e.requires_grad]
            expected_grads = torch.autograd.grad(ref_outs, ref_wants, ref_up, allow_unused=True)
            for got, want in zip(grads, expected_grads):
                assert (got is None) == (want is None)
                if got is not None:
                    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol)

    rows = history_launches(where)
    assert {kernel for _, kernel, _, _ in rows} == case.kernels
    assert [(kernel, status, error) for _, kernel, status, error in rows if status != "ok"] == []
    if replay:
        with History.open(**where) as h:
            for launch_id, kernel, _, _ in rows:
                result = replay_launch(h, launch_id, device="cpu")
                assert result.outcome == "match", (kernel, result.message)


@pytest.fixture
def where(tmp_path):
    return {"db": str(tmp_path / "h.db"), "blobs": str(tmp_path / "blobs")}


# ------------------------------------------------------------------------------- the ops named in the issue


def swiglu(dtype: torch.dtype) -> Case:
    gen = torch.Generator().manual_seed(0)
    a, b = rand(4, 64, dtype=dtype, gen=gen), rand(4, 64, dtype=dtype, gen=gen)
    return Case(
        (a, b),
        L.LigerSiLUMulFunction.apply,
        lambda a, b: F.silu(a) * b,
        {"_swiglu_forward_kernel", "_swiglu_backward_kernel"},
    )


def geglu(dtype: torch.dtype) -> Case:
    gen = torch.Generator().manual_seed(0)
    a, b = rand(4, 64, dtype=dtype, gen=gen), rand(4, 64, dtype=dtype, gen=gen)
    return Case(
        (a, b),
        L.LigerGELUMulFunction.apply,
        lambda a, b: F.gelu(a, approximate="tanh") * b,
        {"_geglu_tanh_forward_kernel", "_geglu_tanh_backward_kernel"},
    )


def rms_norm(dtype: torch.dtype) -> Case:
    gen = torch.Generator().manual_seed(0)
    x, w = rand(4, 64, dtype=dtype, gen=gen), rand(64, dtype=dtype, gen=gen)
    return Case(
        (x, w),
        lambda x, w: L.LigerRMSNormFunction.apply(x, w, 1e-6),
        lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
        {"_rms_norm_forward_kernel", "_rms_norm_backward_kernel"},
    )


def layer_norm(dtype: torch.dtype) -> Case:
    gen = torch.Generator().manual_seed(0)
    x, w, b = (
        rand(4, 64, dtype=dtype, gen=gen),
        rand(64, dtype=dtype, gen=gen),
        rand(64, dtype=dtype, gen=gen),
    )
    return Case(
        (x, w, b),
        lambda x, w, b: L.LigerLayerNormFunction.apply(x, w, b, 1e-6),
        lambda x, w, b: F.layer_norm(x, (64,), w, b, 1e-6),
        {"_layer_norm_forward_kernel", "_layer_norm_backward_kernel"},
    )


def kl_div(dtype: torch.dtype) -> Case:
    gen = torch.Generator().manual_seed(0)
    y_pred = torch.randn(4, 64, generator=gen).log_softmax(-1).to(dtype).requires_grad_()
    y_true = torch.randn(4, 64, generator=gen).softmax(-1).to(dtype)
    return Case(
        (y_pred, y_true),
        lambda p, t: L.LigerKLDivLossFunction.apply(p, t, "batchmean", False, 1e-10),
        lambda p, t: F.kl_div(p, t, reduction="batchmean"),
        {"_kldiv_kernel_forward", "_kldiv_kernel_backward"},
    )


NAMED = {"swiglu": swiglu, "geglu": geglu, "rms_norm": rms_norm, "layer_norm": layer_norm, "kl_div": kl_div}


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(NAMED))
def test_named_ops_record_replay_and_match_pytorch(name, dtype, where):
    run_case(NAMED[name](dtype), where)


# -------------------------------------------------------------------------------------------- more ops


def _jsd(x: torch.Tensor, y: torch.Tensor, beta: float = 0.5) -> torch.Tensor:
    # Liger's generalised JSD of log-probabilities: input X = log Q (student), target Y = log P (teacher).
    q, p = x.exp(), y.exp()
    log_m = torch.log(beta * p + (1 - beta) * q)
    return (beta * p * (y - log_m) + (1 - beta) * q * (x - log_m)).sum() / x.shape[0]


def _sparsemax(x: torch.Tensor) -> torch.Tensor:
    z, _ = torch.sort(x, dim=-1, descending=True)
    k = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
    cumsum = z.cumsum(-1)
    support = 1 + k * z > cumsum
    k_max = support.sum(-1, keepdim=True)
    tau = (cumsum.gather(-1, k_max - 1) - 1) / k_max
    return torch.clamp(x - tau, min=0)


def _poly_norm(x, w, b, eps=1e-6):
    def norm(u):
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)

    return w[0] * norm(x**3) + w[1] * norm(x**2) + w[2] * norm(x) + b


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), -1)


def cross_entropy() -> Case:
    gen = torch.Generator().manual_seed(0)
    x, target = rand(6, 64, gen=gen), torch.randint(0, 64, (6,), generator=gen)
    target[2] = -100
    return Case(
        (x, target),
        lambda x, t: L.LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.1, "mean", 30.0)[0],
        lambda x, t: F.cross_entropy(30.0 * torch.tanh(x / 30.0), t, label_smoothing=0.1),
        {"liger_cross_entropy_kernel", "element_mul_kernel"},
    )


def jsd() -> Case:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, generator=gen).log_softmax(-1).requires_grad_()
    y = torch.randn(4, 64, generator=gen).log_softmax(-1)
    return Case((x, y), L.LigerJSDFunction.apply, _jsd, {"_jsd_kernel"})


def fused_linear_jsd() -> Case:
    gen = torch.Generator().manual_seed(0)
    si, sw = rand(4, 16, gen=gen), rand(64, 16, gen=gen)
    ti, tw = rand(4, 16, grad=False, gen=gen), rand(64, 16, grad=False, gen=gen)
    temperature = 2.0
    return Case(
        (si, sw, ti, tw),
        lambda si, sw, ti, tw: L.LigerFusedLinearJSDFunction.apply(
            si, sw, ti, tw, None, 0.5, -100, temperature
        ),
        lambda si, sw, ti, tw: _jsd(
            (si @ sw.T / temperature).log_softmax(-1), (ti @ tw.T / temperature).log_softmax(-1)
        ),
        {"_jsd_kernel", "element_mul_kernel"},
    )


def softmax() -> Case:
    gen = torch.Generator().manual_seed(0)
    return Case(
        (rand(4, 100, gen=gen),),
        L.LigerSoftmaxFunction.apply,
        lambda x: torch.softmax(x, -1),
        {"_softmax_single_block_forward_kernel", "_softmax_single_block_backward_kernel"},
    )


def group_norm() -> Case:
    gen = torch.Generator().manual_seed(0)
    x, w, b = rand(2, 4, 16, gen=gen), rand(4, gen=gen), rand(4, gen=gen)
    return Case(
        (x, w, b),
        lambda x, w, b: L.LigerGroupNormFunction.apply(x, w, b, 4, 2, 1e-6),
        lambda x, w, b: F.group_norm(x, 2, w, b, 1e-6),
        {"_group_norm_forward_kernel", "_group_norm_backward_kernel"},
    )


def rope() -> Case:
    gen = torch.Generator().manual_seed(0)
    q, k = rand(1, 2, 8, 16, gen=gen), rand(1, 2, 8, 16, gen=gen)
    cos = torch.randn(1, 8, 8, generator=gen).repeat(1, 1, 2)  # HF layout: both halves share frequencies
    sin = torch.randn(1, 8, 8, generator=gen).repeat(1, 1, 2)

    def ref(q, k):
        c, s = cos.double().unsqueeze(1), sin.double().unsqueeze(1)
        return q * c + _rotate_half(q) * s, k * c + _rotate_half(k) * s

    return Case((q, k), lambda q, k: L.LigerRopeFunction.apply(q, k, cos, sin), ref, {"_triton_rope"})


def fused_add_rms_norm() -> Case:
    gen = torch.Generator().manual_seed(0)
    x, r, w = rand(4, 64, gen=gen), rand(4, 64, gen=gen), rand(64, gen=gen)

    def ref(x, r, w):
        s = x + r
        return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * w, s

    return Case(
        (x, r, w),
        lambda x, r, w: L.LigerFusedAddRMSNormFunction.apply(x, r, w, 1e-6),
        ref,
        {"_fused_add_rms_norm_forward_kernel", "_fused_add_rms_norm_backward_kernel"},
    )


def tvd() -> Case:
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(4, 64, generator=gen).softmax(-1).requires_grad_()
    q = torch.randn(4, 64, generator=gen).softmax(-1)
    return Case(
        (p, q),
        L.LigerTVDLossFunction.apply,
        lambda p, q: 0.5 * (p - q).abs().sum() / 4,
        {"_tv_distance_kernel"},
    )


def sparsemax() -> Case:
    gen = torch.Generator().manual_seed(0)
    return Case(
        (rand(4, 64, gen=gen),),
        lambda x: L.LigerSparsemaxFunction.apply(x, -1),
        _sparsemax,
        {"_sparsemax_forward_kernel", "_sparsemax_backward_kernel"},
    )


def relu_squared() -> Case:
    gen = torch.Generator().manual_seed(0)
    return Case(
        (rand(4, 64, gen=gen),),
        L.LigerReLUSquaredFunction.apply,
        lambda x: F.relu(x) ** 2,
        {"_relu_squared_forward_kernel", "_relu_squared_backward_kernel"},
    )


def poly_norm() -> Case:
    gen = torch.Generator().manual_seed(0)
    x, w = rand(4, 64, gen=gen), rand(3, gen=gen)
    b = torch.tensor(0.1, requires_grad=True)
    return Case(
        (x, w, b),
        lambda x, w, b: L.LigerPolyNormFunction.apply(x, w, b, 1e-6),
        _poly_norm,
        {"_poly_norm_forward_kernel", "_poly_norm_backward_kernel"},
    )


def llama4_rope() -> Case:
    gen = torch.Generator().manual_seed(0)
    q, k = rand(1, 8, 2, 16, gen=gen), rand(1, 8, 2, 16, gen=gen)
    freqs = torch.polar(torch.ones(8, 8), torch.randn(8, 8, generator=gen))

    def ref(q, k):
        f = freqs.to(torch.complex128)[None, :, None, :]

        def rotate(x):
            pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
            return torch.view_as_real(pairs * f).flatten(-2)

        return rotate(q), rotate(k)

    return Case(
        (q, k), lambda q, k: L.LigerLlama4RopeFunction.apply(q, k, freqs), ref, {"_llama4_rope_kernel"}
    )


def fused_linear_cross_entropy() -> Case:
    gen = torch.Generator().manual_seed(0)
    x, w, target = rand(4, 16, gen=gen), rand(64, 16, gen=gen), torch.randint(0, 64, (4,), generator=gen)
    return Case(
        (x, w),
        lambda x, w: L.LigerFusedLinearCrossEntropyFunction.apply(x, w, target)[0],
        lambda x, w: F.cross_entropy(x @ w.T, target),
        {"liger_cross_entropy_kernel", "element_mul_kernel"},
    )


def embedding() -> Case:
    gen = torch.Generator().manual_seed(0)
    table, idx = rand(32, 16, gen=gen), torch.randint(0, 32, (4, 3), generator=gen)
    return Case(
        (table, idx),
        L.LigerEmbeddingFunction.apply,
        lambda table, idx: F.embedding(idx, table),
        {"embedding_forward_kernel", "embedding_backward_kernel"},
    )


def gate_up_swiglu() -> Case:
    gen = torch.Generator().manual_seed(0)
    return Case(
        (rand(4, 128, gen=gen),),
        L.LigerFusedGateUpSiLUMulFunction.apply,
        lambda y: F.silu(y[:, :64]) * y[:, 64:],
        {"_swiglu_fused_gate_up_forward_kernel", "_swiglu_fused_gate_up_backward_kernel"},
    )


def selective_log_softmax() -> Case:
    from liger_kernel.ops.grpo_loss import fused_selective_log_softmax

    gen = torch.Generator().manual_seed(0)
    logits, ids = rand(2, 5, 32, grad=False, gen=gen), torch.randint(0, 32, (2, 4), generator=gen)
    return Case(
        (logits, ids),
        lambda lg, ids: fused_selective_log_softmax(lg, ids, 0.9),
        lambda lg, ids: torch.gather((lg[:, :-1] / 0.9).log_softmax(-1), -1, ids[..., None])[..., 0],
        {"_selective_log_softmax_kernel"},
    )


def mhc_pre() -> Case:
    gen = torch.Generator().manual_seed(0)
    x, h = rand(2, 4, 16, gen=gen), rand(2, 4, gen=gen)
    return Case(
        (x, h),
        L.LigerMHCPreFunction.apply,
        lambda x, h: (x * h[..., None]).sum(-2),
        {"_mhc_pre_fwd_kernel", "_mhc_pre_bwd_kernel"},
    )


def vocab_parallel_cross_entropy() -> Case:
    gen = torch.Generator().manual_seed(0)
    x, target = rand(4, 2, 64, gen=gen), torch.randint(0, 64, (4, 2), generator=gen)
    return Case(
        (x, target),
        lambda x, t: L.LigerVocabParallelCEFunction.apply(x, t, None, -100, 0.0, "megatron", "mean"),
        lambda x, t: F.cross_entropy(x.reshape(-1, 64), t.reshape(-1), reduction="none").reshape(4, 2),
        {"liger_vocab_parallel_ce_forward_kernel", "liger_vocab_parallel_ce_backward_kernel"},
    )


def fused_moe() -> Case:
    tokens, hidden, inner, experts, top_k = 6, 16, 16, 4, 2
    gen = torch.Generator().manual_seed(0)
    x = rand(tokens, hidden, gen=gen)
    gate_up, down = rand(experts, 2 * inner, hidden, gen=gen), rand(experts, hidden, inner, gen=gen)
    index = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)]).to(
        torch.int32
    )
    weights = torch.rand(tokens, top_k, generator=gen)

    def ref(x, gate_up, down):
        out = []
        for t in range(tokens):
            acc = 0
            for j in range(top_k):
                e = int(index[t, j])
                h = gate_up[e] @ x[t]
                acc = acc + weights[t, j].double() * (down[e] @ (F.silu(h[:inner]) * h[inner:]))
            out.append(acc)
        return torch.stack(out)

    return Case(
        (x, gate_up, down),
        lambda x, gu, dn: L.LigerFusedMoEFunction.apply(x, gu, dn, index, weights),
        ref,
        {
            "_moe_router_histogram_kernel",
            "_moe_router_prefix_sum_kernel",
            "_moe_router_scatter_kernel",
            "_fused_up_proj_swiglu_kernel",
            "_fused_down_proj_kernel",
            "_token_gather_weighted_sum_kernel",
            "_moe_bwd_down_proj_kernel",
            "_moe_bwd_dW2_kernel",
            "_moe_bwd_dX_expanded_kernel",
            "_moe_bwd_dW1_kernel",
        },
        rtol=1e-4,
        atol=1e-4,
    )


def int2_matmul() -> Case:
    from liger_kernel.ops.experimental.mm_int8int2 import matmul, pack_weights

    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-8, 8, (16, 512), generator=gen, dtype=torch.int8)
    ternary = torch.randint(-1, 2, (512, 16), generator=gen, dtype=torch.int8)
    packed = pack_weights(ternary.clone(), 2)  # packs in place
    return Case(
        (a, packed),
        matmul,
        lambda a, p: (a.to(torch.int64) @ ternary.to(torch.int64)).to(torch.int32),
        {"matmul_kernel"},
    )


MORE = {
    "cross_entropy": cross_entropy,
    "jsd": jsd,
    "fused_linear_jsd": fused_linear_jsd,
    "softmax": softmax,
    "group_norm": group_norm,
    "rope": rope,
    "fused_add_rms_norm": fused_add_rms_norm,
    "tvd": tvd,
    "sparsemax": sparsemax,
    "relu_squared": relu_squared,
    "poly_norm": poly_norm,
    "llama4_rope": llama4_rope,
    "fused_linear_cross_entropy": fused_linear_cross_entropy,
    "embedding": embedding,
    "gate_up_swiglu": gate_up_swiglu,
    "selective_log_softmax": selective_log_softmax,
    "mhc_pre": mhc_pre,
    "vocab_parallel_cross_entropy": vocab_parallel_cross_entropy,
    "fused_moe": fused_moe,
    "int2_matmul": int2_matmul,
}


@pytest.mark.parametrize("name", list(MORE))
def test_more_ops_record_replay_and_match_pytorch(name, where):
    run_case(MORE[name](), where)


def test_dyt_forward_and_backward_kernel(where):
    # Liger's backward wrapper sizes its partial sums by the GPU's SM count and has no CPU branch, so the
    # backward kernel is launched here the way that wrapper launches it, with two "SMs".
    from liger_kernel.ops.dyt import _dyt_bwd_kernel

    gen = torch.Generator().manual_seed(0)
    x, alpha, gamma, beta = rand(4, 64, gen=gen), rand(1, gen=gen), rand(64, gen=gen), rand(64, gen=gen)
    dy = torch.randn(4, 64, generator=gen)
    x64, a64, g64, b64 = (t.detach().double().requires_grad_() for t in (x, alpha, gamma, beta))
    y64 = g64 * torch.tanh(a64 * x64) + b64
    grads64 = torch.autograd.grad(y64, (x64, a64, g64, b64), dy.double())
    sms, (m, n) = 2, x.shape
    with tilelens.record(**where), torch.no_grad():
        y = L.LigerDyTFunction.apply(x, alpha, gamma, beta)
        da = torch.zeros(sms, triton.cdiv(n, 512))
        dg, db, dx = torch.empty(sms, n), torch.empty(sms, n), torch.empty_like(dy)
        _dyt_bwd_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_N"]), sms)](
            dy, dx, da, dg, db, x, alpha, gamma, True, m, n
        )
    torch.testing.assert_close(y.double(), y64.detach(), rtol=1e-5, atol=1e-5)
    for got, want in zip((dx, da.sum().reshape(1), dg.sum(0), db.sum(0)), grads64):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    rows = history_launches(where)
    assert [(kernel, status) for _, kernel, status, _ in rows] == [
        ("_dyt_fwd_kernel", "ok"),
        ("_dyt_bwd_kernel", "ok"),
    ]
    with History.open(**where) as h:
        assert all(replay_launch(h, launch_id).outcome == "match" for launch_id, *_ in rows)


# ------------------------------------------------- ops without a reference here: they record and replay

SMOKE: dict[str, Callable[[], tuple[Callable[[], Any], set[str]]]] = {}


def smoke(fn):
    SMOKE[fn.__name__] = fn
    return fn


@smoke
def qwen2vl_mrope():
    gen = torch.Generator().manual_seed(0)
    q, k = rand(1, 2, 8, 16, gen=gen), rand(1, 2, 8, 16, gen=gen)
    cos, sin = torch.randn(3, 1, 8, 16, generator=gen), torch.randn(3, 1, 8, 16, generator=gen)
    return (
        (q, k),
        lambda q, k: L.LigerQwen2VLMRopeFunction.apply(q, k, cos, sin, [2, 3, 3]),
        {"_triton_qwen2vl_mrope"},
    )


@smoke
def multi_token_attention():
    gen = torch.Generator().manual_seed(0)
    scores, weight = rand(1, 2, 8, 8, gen=gen), rand(2, 2, 3, 3, gen=gen)
    return (
        (scores, weight),
        lambda s, w: L.LigerMultiTokenAttentionFunction.apply(s, w, None, 1, 1),
        {"_mask_fwd_kernel", "_mask_bwd_kernel", "_softmax_single_block_forward_kernel"},
    )


@smoke
def fused_neighborhood_attention():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (rand(1, 2, 16, 8, gen=gen) for _ in range(3))
    return (
        (q, k, v),
        lambda q, k, v: L.LigerFusedNeighborhoodAttentionFunction.apply(q, k, v, 3, 1),
        {
            "_neighborhood_mask_kernel",
            "_fused_neighborhood_attention_qk_kernel",
            "_softmax_single_block_forward_kernel",
            "_fused_neighborhood_attention_av_kernel",
            "_fused_neighborhood_attention_grad_attn_kernel",
            "_softmax_single_block_backward_kernel",
            "_fused_neighborhood_attention_grad_qk_kernel",
            "_fused_neighborhood_attention_grad_k_kernel",
            "_fused_neighborhood_attention_grad_v_kernel",
        },
    )


@smoke
def grpo_loss():
    from liger_kernel.ops.grpo_loss import GrpoLossFunction

    gen = torch.Generator().manual_seed(0)
    b, t, v = 2, 4, 32
    logits, ids = rand(b, t + 1, v, gen=gen), torch.randint(0, v, (b, t), generator=gen)
    adv, old, ref = (
        torch.randn(b, generator=gen),
        torch.randn(b, t, generator=gen),
        torch.randn(b, t, generator=gen),
    )
    mask = torch.ones(b, t, dtype=torch.int32)

    def op(lg):
        token = GrpoLossFunction.apply(lg, old, ref, ids, adv, mask, 1.0, 0.04, 0.2, 0.2, False)[0]
        seq = GrpoLossFunction.apply(
            lg, old, ref, ids, adv, mask, 1.0, 0.04, 0.2, 0.2, False, "grpo", None, True, "sequence"
        )[0]
        return token + seq

    return (
        (logits,),
        op,
        {
            "_grpo_loss_fwd_kernel",
            "_grpo_loss_bwd_kernel",
            "_grpo_loss_fwd_kernel_seq",
            "_grpo_loss_bwd_kernel_seq",
            "_selective_log_softmax_kernel",
        },
    )


@smoke
def fused_linear_kl_div():
    gen = torch.Generator().manual_seed(0)
    x, w = rand(4, 16, gen=gen), rand(64, 16, gen=gen)
    target = torch.randn(4, 64, generator=gen).softmax(-1)
    return (
        (x, w),
        lambda x, w: L.LigerFusedLinearKLDivFunction.apply(x, w, target),
        {"_kl_div_kernel", "element_mul_kernel"},
    )


@smoke
def fused_ce_tvd():
    gen = torch.Generator().manual_seed(0)
    student, teacher = rand(4, 64, gen=gen), torch.randn(4, 64, generator=gen)
    target = torch.randint(0, 64, (4,), generator=gen)
    return (
        (student,),
        lambda s: L.LigerFusedCETVDFunction.apply(s, teacher, target),
        {"_fused_ce_tvd_forward_kernel", "_fused_ce_tvd_backward_kernel"},
    )


@smoke
def modulated_rms_norm():
    gen = torch.Generator().manual_seed(0)
    x, w = rand(4, 64, gen=gen), rand(64, gen=gen)
    scale, shift = rand(4, 64, grad=False, gen=gen), rand(4, 64, grad=False, gen=gen)
    return (
        (x, w),
        lambda x, w: L.LigerModulatedRMSNormFunction.apply(x, w, scale, shift, 1e-6),
        {"_modulated_rms_norm_forward_kernel", "_modulated_rms_norm_backward_kernel"},
    )


@smoke
def attn_res():
    gen = torch.Generator().manual_seed(0)
    values, wq, wn = rand(3, 4, 64, gen=gen), rand(64, gen=gen), rand(64, gen=gen)
    return (
        (values, wq, wn),
        lambda *a: L.LigerAttnResFunction.apply(*a, 1e-6),
        {"_attn_res_fwd_kernel", "_attn_res_bwd_kernel"},
    )


@smoke
def mhc_post_res():
    gen = torch.Generator().manual_seed(0)
    x, f = rand(2, 4, 16, gen=gen), rand(2, 16, gen=gen)
    h_post, h_res = rand(2, 4, gen=gen), rand(2, 4, 4, gen=gen)
    return (
        (x, f, h_post, h_res),
        L.LigerMHCPostResFunction.apply,
        {"_mhc_post_res_fwd_kernel", "_mhc_post_res_bwd_kernel"},
    )


@smoke
def mhc_coeffs():
    gen = torch.Generator().manual_seed(0)
    x, phi, b = rand(2, 4, 16, gen=gen), rand(64, 24, gen=gen), rand(24, gen=gen)
    alphas = tuple(torch.tensor(0.5, requires_grad=True) for _ in range(3))
    return (
        (x, phi, b, *alphas),
        lambda *a: L.LigerMHCCoeffsFunction.apply(*a, True, 4, 1e-6, 1e-6, 1e-6, 2.0),
        {
            "_mhc_mm_norm_fwd_kernel",
            "_mhc_split_sinkhorn_fwd_kernel",
            "_mhc_sinkhorn_bwd_hist_kernel",
            "_mhc_mm_norm_bwd_fused_kernel",
        },
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # masked-off lanes divide 0 by 0, as on a GPU
@pytest.mark.parametrize("name", list(SMOKE))
def test_ops_without_reference_record_and_replay(name, where):
    inputs, op, kernels = SMOKE[name]()
    run_case(Case(inputs, op, None, kernels), where)
