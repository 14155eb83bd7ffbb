"""The ten workloads of the suite, each with several shapes.

A workload named after a real library's kernel runs that library's kernel (through its package) when
TileLens can record it, and otherwise the kernel written here for the same computation; each case says which
in ``source`` so the report never passes one off as the other.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton

from benchmarks import kernels as k

HERE = "written here"


@dataclass
class Case:
    workload: str
    shape: str
    run: Callable[[], object]
    source: str = HERE
    fallback: Callable[[], Case] | None = None  # the written-here version, when this case uses a library

    @property
    def name(self) -> str:
        return f"{self.workload}[{self.shape}]"


def _liger_version() -> str | None:
    try:
        return importlib.metadata.version("liger-kernel")
    except importlib.metadata.PackageNotFoundError:
        return None


def gemm(size: int, oob: bool = False, block: int = 32) -> Case:
    a, b = torch.randn(size, size), torch.randn(size, size)
    if oob:
        # The stray read lands on a zero just past b, in memory we own: replay pads with zeros too.
        buf = torch.randn(size * size + 1)
        buf[-1] = 0.0
        b = buf[: size * size].view(size, size)
    c = torch.empty(size, size)
    grid = (size // block, size // block)

    def run() -> object:
        return k.gemm_kernel[grid](a, b, c, size, size, size, BM=block, BN=block, BK=block, OOB=oob)

    return Case("gemm_oob" if oob else "gemm", f"{size}^3", run)


def indirect_load(n: int) -> Case:
    src = torch.randn(n)
    idx = torch.randint(0, n, (n,), dtype=torch.int32)
    out = torch.empty(n)
    return Case(
        "indirect_load",
        str(n),
        lambda: k.indirect_load_kernel[(triton.cdiv(n, 1024),)](src, idx, out, n, BLOCK=1024),
    )


def nested_loop(m: int, n: int) -> Case:
    x = torch.randn(m, n)
    bm, bn = 16, 64
    out = torch.empty(triton.cdiv(m, bm) * bn)
    return Case(
        "nested_loop",
        f"{m}x{n}",
        lambda: k.nested_loop_kernel[(triton.cdiv(m, bm),)](x, out, m, n, BM=bm, BN=bn),
    )


def block_pointer_loop_advance(m: int, n: int) -> Case:
    x = torch.randn(m, n)
    bm, bn = 32, 64
    out = torch.empty(m, bn)
    return Case(
        "block_pointer_loop_advance",
        f"{m}x{n}",
        lambda: k.block_pointer_loop_kernel[(triton.cdiv(m, bm),)](x, out, m, n, BM=bm, BN=bn),
    )


def _jsd_here(rows: int, cols: int) -> Case:
    x = torch.log_softmax(torch.randn(rows, cols), -1)
    y = torch.log_softmax(torch.randn(rows, cols), -1)
    loss = torch.empty(rows)
    return Case(
        "liger_jsd", f"{rows}x{cols}", lambda: k.jsd_kernel[(rows,)](x, y, loss, cols, 0.5, BLOCK=1024)
    )


def liger_jsd(rows: int, cols: int) -> Case:
    version = _liger_version()
    if version is None:
        return _jsd_here(rows, cols)
    from liger_kernel.ops.jsd import LigerJSDFunction

    x = torch.log_softmax(torch.randn(rows, cols), -1)
    y = torch.log_softmax(torch.randn(rows, cols), -1)
    return Case(
        "liger_jsd",
        f"{rows}x{cols}",
        lambda: LigerJSDFunction.apply(x, y, None, 0.5, -100),
        source=f"liger-kernel {version} (LigerJSDFunction)",
        fallback=lambda: _jsd_here(rows, cols),
    )


def flaggems_layernorm(rows: int, cols: int) -> Case:
    x = torch.randn(rows, cols)
    w, b = torch.randn(cols), torch.randn(cols)
    y = torch.empty_like(x)
    return Case(
        "flaggems_layernorm",
        f"{rows}x{cols}",
        lambda: k.layernorm_kernel[(rows,)](x, w, b, y, cols, 1e-5, BLOCK=256),
        source=HERE + " (FlagGems needs a GPU driver at import)",
    )


def _swiglu_here(rows: int, cols: int) -> Case:
    a, b = torch.randn(rows, cols), torch.randn(rows, cols)
    c = torch.empty_like(a)
    block = triton.next_power_of_2(cols)
    return Case("swiglu", f"{rows}x{cols}", lambda: k.swiglu_kernel[(rows,)](a, b, c, cols, BLOCK=block))


def swiglu(rows: int, cols: int) -> Case:
    version = _liger_version()
    if version is None:
        return _swiglu_here(rows, cols)
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    a, b = torch.randn(rows, cols), torch.randn(rows, cols)
    return Case(
        "swiglu",
        f"{rows}x{cols}",
        lambda: LigerSiLUMulFunction.apply(a, b),
        source=f"liger-kernel {version} (LigerSiLUMulFunction)",
        fallback=lambda: _swiglu_here(rows, cols),
    )


def _cross_entropy_here(rows: int, cols: int) -> Case:
    logits = torch.randn(rows, cols)
    target = torch.randint(0, cols, (rows,), dtype=torch.int32)
    loss = torch.empty(rows)
    return Case(
        "cross_entropy",
        f"{rows}x{cols}",
        lambda: k.cross_entropy_kernel[(rows,)](logits, target, loss, cols, BLOCK=1024),
    )


def cross_entropy(rows: int, cols: int) -> Case:
    version = _liger_version()
    if version is None:
        return _cross_entropy_here(rows, cols)
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

    logits = torch.randn(rows, cols)
    target = torch.randint(0, cols, (rows,))
    return Case(
        "cross_entropy",
        f"{rows}x{cols}",
        lambda: LigerCrossEntropyFunction.apply(logits.clone(), target, None),
        source=f"liger-kernel {version} (LigerCrossEntropyFunction)",
        fallback=lambda: _cross_entropy_here(rows, cols),
    )


def _fused_linear_jsd_here(rows: int, hidden: int, vocab: int) -> Case:
    h = torch.randn(rows, hidden) / hidden**0.5
    w = torch.randn(vocab, hidden)
    t = torch.log_softmax(torch.randn(rows, vocab), -1)
    loss = torch.empty(rows)
    return Case(
        "fused_linear_jsd",
        f"{rows}x{hidden}x{vocab}",
        lambda: k.fused_linear_jsd_kernel[(rows,)](h, w, t, loss, hidden, vocab, 0.5, BH=32, BV=64),
    )


def fused_linear_jsd(rows: int, hidden: int, vocab: int) -> Case:
    version = _liger_version()
    if version is None:
        return _fused_linear_jsd_here(rows, hidden, vocab)
    from liger_kernel.ops.fused_linear_jsd import LigerFusedLinearJSDFunction

    h = torch.randn(rows, hidden)
    w = torch.randn(vocab, hidden)
    th = torch.randn(rows, hidden)
    tw = torch.randn(vocab, hidden)
    return Case(
        "fused_linear_jsd",
        f"{rows}x{hidden}x{vocab}",
        lambda: LigerFusedLinearJSDFunction.apply(h, w, th, tw, None, 0.5, -100, 1.0),
        source=f"liger-kernel {version} (LigerFusedLinearJSDFunction)",
        fallback=lambda: _fused_linear_jsd_here(rows, hidden, vocab),
    )


def softmax(rows: int, cols: int) -> Case:
    """The recorder issue's second target (64 x 1000), beside gemm[256^3] with 32 x 32 x 32 tiles."""
    x = torch.randn(rows, cols)
    y = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    return Case("softmax", f"{rows}x{cols}", lambda: k.softmax_kernel[(rows,)](x, y, cols, BLOCK=block))


def all_cases(quick: bool) -> list[Case]:
    """Every workload in the seed table's order; ``quick`` keeps one shape of each."""
    from tilelens.core import compat

    shapes: list[list[Callable[[], Case]]] = [
        [lambda: gemm(128), lambda: gemm(256)],
        [lambda: gemm(128, oob=True), lambda: gemm(256, oob=True)],
        [lambda: indirect_load(8192), lambda: indirect_load(65536)],
        [lambda: nested_loop(64, 512), lambda: nested_loop(128, 1024)],
        [lambda: block_pointer_loop_advance(128, 512), lambda: block_pointer_loop_advance(256, 1024)]
        if compat.HAS_BLOCK_POINTERS
        else [],
        [lambda: liger_jsd(16, 4096), lambda: liger_jsd(64, 4096)],
        [lambda: flaggems_layernorm(64, 1024), lambda: flaggems_layernorm(256, 1024)],
        [lambda: swiglu(64, 1024), lambda: swiglu(256, 1024)],
        [lambda: cross_entropy(16, 4096), lambda: cross_entropy(64, 4096)],
        [lambda: fused_linear_jsd(8, 128, 256), lambda: fused_linear_jsd(16, 128, 512)],
    ]
    # The recorder's own targets: a 256^3 fp32 matmul in 32^3 tiles (gemm above) and a 64 x 1000 softmax.
    targets = [lambda: gemm(256), lambda: softmax(64, 1000)]
    if quick:
        return [make() for group in shapes for make in group[:1]] + [make() for make in targets]
    return [make() for group in shapes for make in group] + [targets[1]()]
