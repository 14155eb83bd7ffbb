"""The CPU stand-in of the GPU benchmark's step: Triton's layers with a fake compiled launch.

Four launches of an autotuned kernel (its tuning preset: the stand-in cannot benchmark) and one plain launch,
through a fake compiled runner that binds the arguments as Triton's ``JITFunction.run`` does and calls the
grid. What it times is TileLens's own path on the launching thread (interception, the router's capture, the
writer), without a GPU: ``benchmarks.capture_overhead`` and ``benchmarks.writer_throughput`` use it.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import triton
import triton.language as tl

from tilelens.core import compat
from tilelens.core import patches as interpreter

LAUNCHES_PER_STEP = 5  # stand_in_step: four of the autotuned kernel, one plain

with interpreter.compiled_mode():  # JITFunctions, whatever TRITON_INTERPRET says

    @triton.jit
    def rms_like(x_ptr, w_ptr, y_ptr, rstd_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + offs, mask=offs < n_cols)
        tl.store(y_ptr + row * stride + offs, x * tl.load(w_ptr + offs) * eps, mask=offs < n_cols)
        tl.store(rstd_ptr + row, eps)

    @triton.autotune(
        configs=[triton.Config({"BM": 16}, num_warps=4), triton.Config({"BM": 32}, num_warps=8)],
        key=["M", "N"],
    )
    @triton.jit
    def mm_like(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr):
        pid = tl.program_id(0)
        tl.store(c_ptr + pid, tl.load(a_ptr + pid) + tl.load(b_ptr + pid))

    # The tuning key of mm_like's launches below; the stand-in cannot benchmark, so the choice is preset.
    MM_KEY = (64, 64, "torch.bfloat16", "torch.bfloat16", "torch.bfloat16")


_META = types.SimpleNamespace(metadata=types.SimpleNamespace(shared=0, num_warps=4, num_stages=3), n_regs=32)


def fake_runner(jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
    """What Triton's ``JITFunction.run`` does in Python around its C launcher, cut to the bone: bind the
    arguments by name, every parameter in order and no launch option (as Triton's binder does; the stand-in
    kernels have no defaults), and hand them to a callable grid (TileLens reads them there:
    ``binds_like_triton``)."""
    names = jit.arg_names
    bound = dict(zip(names, args))
    if kwargs:
        for name in names[len(args) :]:
            if name in kwargs:
                bound[name] = kwargs[name]
    if callable(grid):
        grid(bound)
    return _META


fake_runner.binds_like_triton = True  # type: ignore[attr-defined]


def stand_in_step() -> Any:
    """One step of the GPU benchmark's pattern on the CPU: four launches of an autotuned kernel (its tuning
    preset: the stand-in cannot benchmark), one plain launch. Run with :func:`fake_runner` as the runner."""
    x = torch.zeros(64, 128)
    w = torch.ones(128)
    y = torch.empty_like(x)
    rstd = torch.empty(64)
    a, b, c = (torch.zeros(64, 64, dtype=torch.bfloat16) for _ in range(3))
    mm_like.cache[MM_KEY] = mm_like.configs[0]

    def step() -> None:
        for _ in range(4):
            mm_like[lambda m: (4,)](a, b, c, 64, 64, 64)
        rms_like[(64,)](x, w, y, rstd, x.stride(0), 128, 1e-6, BLOCK=128, num_warps=4)

    return step


def stand_in_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
    """A stand-in for Triton's ``JITFunction.run``: :func:`fake_runner`, reached the way Triton's run is."""
    return fake_runner(self, args, grid, kwargs)


@contextmanager
def stand_in_triton_run() -> Iterator[None]:
    """``JITFunction.run`` is :func:`stand_in_run` for the block, Triton's own layers (the autotuner's cache
    lookup, the grid lambda) left as they are; restored also on error. A recording begun inside the block takes
    the path it takes on a GPU: its router calls "Triton's run" directly, with the call's own arguments. Only
    the benchmarks and their tests use it, never a program being recorded."""
    with interpreter.attribute_replaced(compat.JITFunction, "run", stand_in_run):
        yield
