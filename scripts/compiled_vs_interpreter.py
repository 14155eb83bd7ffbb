"""Compare what compiled Triton computes on a GPU with what TileLens's interpreter computes on the CPU.

Same kernels, same inputs (built on the CPU from fixed seeds), two runs:

    python scripts/compiled_vs_interpreter.py cuda compiled.pt     # on a CUDA machine; imports no TileLens
    python scripts/compiled_vs_interpreter.py cpu interpreted.pt   # here: every launch inside tilelens.record()
    python scripts/compiled_vs_interpreter.py compare compiled.pt interpreted.pt

The kernels are the semantic-gap kernels (tests/semantic_kernels.py), the tutorial-style kernels
(tests/tutorial_kernels.py) and Liger Kernel ops forward and backward (liger-kernel must be importable; on a
GPU machine without it, carry its wheel). ``compare`` prints, per output, whether the two runs agree bit for
bit, and otherwise the largest absolute and relative difference.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES: dict[str, Callable[[str], dict[str, torch.Tensor]]] = {}


def case(fn: Callable[[str], dict[str, torch.Tensor]]) -> Callable[[str], dict[str, torch.Tensor]]:
    CASES[fn.__name__] = fn
    return fn


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def cpu(outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in outputs.items()}


# ------------------------------------------------------------------------------------------ semantic gaps


@case
def float_param(dev):
    from tests import semantic_kernels as sk

    x = torch.randn(64, generator=gen()).to(dev)
    h = torch.randn(64, generator=gen(1)).half().to(dev)
    out, hout = torch.empty(64, device=dev), torch.empty(64, device=dev)
    sk.float_param_to[(1,)](x, out, 0.3, N=64)
    sk.float_param_times_half[(1,)](h, hout, 0.1, N=64)
    wide = torch.zeros(1, dtype=torch.int64, device=dev)
    sk.wide_int_param[(1,)](wide, 2**31 + 5)
    return cpu({"x*scale.to(fp32)": out, "fp16*scale": hout, "n+n": wide})


@case
def bf16_ops(dev):
    from tests import semantic_kernels as sk

    x = torch.randn(64, generator=gen()).bfloat16().to(dev)
    y = torch.randn(64, generator=gen(1)).bfloat16().to(dev)
    const, elem = torch.empty_like(x), torch.empty(5 * 64, dtype=torch.bfloat16, device=dev)
    sk.bf16_constants[(1,)](x, const, N=64)
    sk.bf16_elementwise[(1,)](x, y, elem, N=64)
    ties = [1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 1.0 + 2**-8 + 2**-20, 3.0e38, 1e-40]
    f = torch.tensor(ties + torch.randn(58, generator=gen(2)).tolist(), dtype=torch.float32).to(dev)
    stored = torch.empty(64, dtype=torch.bfloat16, device=dev)
    sk.store_as_bf16[(1,)](f, stored, N=64)
    a = torch.randn(16, 16, generator=gen(3)).bfloat16().to(dev)
    b = torch.randn(16, 16, generator=gen(4)).bfloat16().to(dev)
    c = torch.empty(16, 16, device=dev)
    sk.bf16_dot[(1,)](a, b, c, N=16)
    red, idx = torch.empty(3, dtype=torch.bfloat16, device=dev), torch.empty(1, dtype=torch.int32, device=dev)
    cum = torch.empty(32, dtype=torch.bfloat16, device=dev)
    sk.bf16_reductions[(1,)](x[:32].contiguous(), red, idx, cum, N=32)
    pairs = torch.zeros(2, dtype=torch.bfloat16, device=dev)
    sk.atomic_add_pairs[(1,)](x[:16].contiguous(), pairs, N=16)
    return cpu(
        {
            "x*2.0+1.5": const,
            "elementwise": elem,
            "fp32->bf16 store": stored,
            "dot": c,
            "sum/max/min": red,
            "argmax": idx,
            "cumsum": cum,
            "atomic_add": pairs,
        }
    )


@case
def libdevice(dev):
    from tests import semantic_kernels as sk

    x = torch.rand(64, generator=gen()).to(dev)
    out = torch.empty(3 * 64, device=dev)
    sk.libdevice_calls[(1,)](x, out, N=64)
    return cpu({"tanh": out[:64], "rsqrt": out[64:128], "exp": out[128:]})


@case
def already_working(dev):
    from tests import semantic_kernels as sk

    g = gen(5)
    x, h = torch.randn(128, generator=g).to(dev), torch.randn(128, generator=g).half().to(dev)
    i = torch.randint(-1000, 1000, (128,), generator=g, dtype=torch.int32).to(dev)
    out, hout = torch.zeros(128, device=dev), torch.zeros(128, dtype=torch.float16, device=dev)
    iout = torch.zeros(128, dtype=torch.int32, device=dev)
    sk.mixed_working_kernel[(1,)](x, h, i, out, hout, iout, 100, N=128)
    return cpu({"fp32": out, "fp16": hout, "int32": iout})


# ------------------------------------------------------------------------------------------------ tutorials


@case
def tutorials(dev):
    import triton

    from tests import tutorial_kernels as tk

    g = gen(6)
    x = torch.randn(6, 100, generator=g).to(dev)
    sm = torch.empty_like(x)
    tk.fused_softmax[(6,)](sm, x, x.stride(0), 100, BLOCK=128)
    outputs = {"softmax": sm}
    for dtype in (torch.float32, torch.bfloat16):
        xs = torch.randn(8, 100, generator=g).to(dtype).to(dev)
        w, b = (
            torch.randn(100, generator=g).to(dtype).to(dev),
            torch.randn(100, generator=g).to(dtype).to(dev),
        )
        dy = torch.randn(8, 100, generator=g).to(dtype).to(dev)
        y, dx = torch.empty_like(xs), torch.empty_like(xs)
        mean, rstd = torch.empty(8, device=dev), torch.empty(8, device=dev)
        dw, db = torch.zeros(100, device=dev), torch.zeros(100, device=dev)
        lock = torch.zeros(1, dtype=torch.int32, device=dev)
        tk.layer_norm_fwd[(8,)](xs, y, w, b, mean, rstd, 100, 1e-5, BLOCK=128)
        tk.layer_norm_bwd[(8,)](dy, xs, w, mean, rstd, dx, dw, db, lock, 100, BLOCK=128)
        name = str(dtype).removeprefix("torch.")
        outputs |= {f"layer_norm y {name}": y, f"dx {name}": dx, f"dw {name}": dw, f"db {name}": db}
    d_in = (torch.randn(1000, generator=g) + 5).to(dev)
    dropped = torch.empty_like(d_in)
    tk.seeded_dropout[(4,)](d_in, dropped, 1000, 0.3, 1234, BLOCK=256)
    a = torch.randn(48, 72, generator=g).bfloat16().to(dev)
    bm = torch.randn(72, 40, generator=g).bfloat16().to(dev)
    c = torch.empty(48, 40, dtype=torch.bfloat16, device=dev)
    tk.matmul_leaky_relu[lambda m: (triton.cdiv(48, m["BM"]) * triton.cdiv(40, m["BN"]),)](
        a, bm, c, 48, 40, 72, 0.01
    )
    return cpu(outputs | {"dropout": dropped, "bf16 matmul": c})


# ----------------------------------------------------------------------------------------------------- Liger


def _liger(dev, name, build, op):
    inputs = build()
    moved = [t.to(dev).requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t for t in inputs]
    out = op(*moved)
    outs = out if isinstance(out, tuple) else (out,)
    g = gen(9)
    ups = [torch.randn(o.shape, generator=g).to(o.dtype).to(dev) for o in outs]
    wants = [t for t in moved if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(outs, wants, ups) if wants else ()
    result = {f"{name} out{i}": o for i, o in enumerate(outs)}
    result |= {f"{name} grad{i}": gr for i, gr in enumerate(grads) if gr is not None}
    return cpu(result)


@case
def liger(dev):
    from liger_kernel import ops as L

    results: dict[str, torch.Tensor] = {}
    for dtype in (torch.float32, torch.bfloat16):
        tag = "bf16" if dtype == torch.bfloat16 else "fp32"
        for name, (build, op) in _liger_ops(L, dtype).items():
            try:
                results |= _liger(dev, f"{name} {tag}", build, op)
            except Exception as exc:  # report and go on: one op's failure says nothing about the others
                print(f"liger {name} {tag}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return results


def _liger_ops(L, dtype):  # noqa: N803 (the module's usual alias)
    def r(*shape, grad=True, seed=0):
        return torch.randn(*shape, generator=gen(seed)).to(dtype).requires_grad_(grad)

    return {
        "swiglu": (lambda: (r(4, 64), r(4, 64, seed=1)), L.LigerSiLUMulFunction.apply),
        "geglu": (lambda: (r(4, 64), r(4, 64, seed=1)), L.LigerGELUMulFunction.apply),
        "rms_norm": (
            lambda: (r(4, 64), r(64, seed=1)),
            lambda x, w: L.LigerRMSNormFunction.apply(x, w, 1e-6),
        ),
        "layer_norm": (
            lambda: (r(4, 64), r(64, seed=1), r(64, seed=2)),
            lambda x, w, b: L.LigerLayerNormFunction.apply(x, w, b, 1e-6),
        ),
        "kl_div": (
            lambda: (
                torch.randn(4, 64, generator=gen()).log_softmax(-1).to(dtype).requires_grad_(),
                torch.randn(4, 64, generator=gen(1)).softmax(-1).to(dtype),
            ),
            lambda p, t: L.LigerKLDivLossFunction.apply(p, t, "batchmean", False, 1e-10),
        ),
        "cross_entropy": (
            lambda: (r(6, 64), torch.randint(0, 64, (6,), generator=gen(1))),
            lambda x, t: L.LigerCrossEntropyFunction.apply(x, t, None, -100, 0.0, 0.1, "mean", 30.0)[0],
        ),
        "softmax": (lambda: (r(4, 100),), L.LigerSoftmaxFunction.apply),
        "group_norm": (
            lambda: (r(2, 4, 16), r(4, seed=1), r(4, seed=2)),
            lambda x, w, b: L.LigerGroupNormFunction.apply(x, w, b, 4, 2, 1e-6),
        ),
        "fused_add_rms_norm": (
            lambda: (r(4, 64), r(4, 64, seed=1), r(64, seed=2)),
            lambda x, res, w: L.LigerFusedAddRMSNormFunction.apply(x, res, w, 1e-6),
        ),
        "jsd": (
            lambda: (
                torch.randn(4, 64, generator=gen()).log_softmax(-1).to(dtype).requires_grad_(),
                torch.randn(4, 64, generator=gen(1)).log_softmax(-1).to(dtype),
            ),
            L.LigerJSDFunction.apply,
        ),
        "dyt_forward": (
            lambda: (
                r(4, 64, grad=False),
                r(1, grad=False, seed=1),
                r(64, grad=False, seed=2),
                r(64, grad=False, seed=3),
            ),
            L.LigerDyTFunction.apply,
        ),
        "poly_norm": (
            lambda: (r(4, 64), r(3, seed=1), torch.tensor(0.1, dtype=dtype, requires_grad=True)),
            lambda x, w, b: L.LigerPolyNormFunction.apply(x, w, b, 1e-6),
        ),
        "relu_squared": (lambda: (r(4, 64),), L.LigerReLUSquaredFunction.apply),
        "embedding": (
            lambda: (r(32, 16), torch.randint(0, 32, (4, 3), generator=gen(1))),
            L.LigerEmbeddingFunction.apply,
        ),
    }


# --------------------------------------------------------------------------------------------------- driver


def run(device: str, path: str) -> None:
    results: dict[str, dict[str, torch.Tensor]] = {}
    if device == "cpu":
        import tilelens

        where = tempfile.mkdtemp()
        with tilelens.record(db=f"{where}/h.db", blobs=f"{where}/blobs"):
            for name, fn in CASES.items():
                results[name] = fn("cpu")
    else:
        for name, fn in CASES.items():
            results[name] = fn(device)
            torch.cuda.synchronize()
    import triton

    torch.save({"triton": triton.__version__, "torch": str(torch.__version__), "results": results}, path)
    print(f"{sum(len(v) for v in results.values())} outputs from {len(results)} cases -> {path}")


def compare(a_path: str, b_path: str) -> None:
    a, b = torch.load(a_path), torch.load(b_path)
    print(f"A: {a_path} (triton {a['triton']}, torch {a['torch']})")
    print(f"B: {b_path} (triton {b['triton']}, torch {b['torch']})")
    identical = total = 0
    for case_name, outputs in a["results"].items():
        for name, x in outputs.items():
            y = b["results"].get(case_name, {}).get(name)
            total += 1
            if y is None:
                print(f"{case_name:16s} {name:28s} missing in B")
                continue
            same_bits = x.dtype == y.dtype and x.shape == y.shape and _bits(x).equal(_bits(y))
            if same_bits:
                identical += 1
                print(f"{case_name:16s} {name:28s} bit-identical")
                continue
            xf, yf = x.double(), y.double()
            both_nan = xf.isnan() & yf.isnan()
            diff = (xf - yf).abs().masked_fill(both_nan, 0)
            rel = diff / yf.abs().clamp_min(1e-30)
            print(
                f"{case_name:16s} {name:28s} max abs {diff.max().item():.3g}  max rel {rel.max().item():.3g}"
            )
    print(f"{identical} of {total} outputs bit-identical")


def _bits(t: torch.Tensor) -> torch.Tensor:
    views = {2: torch.int16, 4: torch.int32, 8: torch.int64}
    if t.is_floating_point() and t.element_size() in views:
        return t.view(views[t.element_size()])
    return t


if __name__ == "__main__":
    if sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[1], sys.argv[2])
