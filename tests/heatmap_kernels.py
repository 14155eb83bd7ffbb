"""Kernels with a known access pattern, for the heatmap tests (decorated in compiled mode, as tests/kernels.py)."""

from __future__ import annotations

import triton
import triton.language as tl
from triton import knobs

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def every_third(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        # Reads and writes every third element of contiguous x and y; lanes at or past n are masked off.
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = 3 * i < n
        v = tl.load(x_ptr + 3 * i, mask=mask)
        tl.store(y_ptr + 3 * i, v + 1.0, mask=mask)

    @triton.jit
    def unmasked_tail(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        # Reads x with a mask, stores y without one: the last block's tail goes out of bounds.
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(y_ptr + offs, v)  # BUG on purpose: no mask

    @triton.jit
    def histogram(x_ptr, bins_ptr, n, BLOCK: tl.constexpr):
        # Atomically counts x's values (small integers) into bins.
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(x_ptr + offs, mask=mask, other=0)
        tl.atomic_add(bins_ptr + v, 1, mask=mask)


def _hostile_copy(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def _every_third_v2(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = 3 * i < n
    tl.store(y_ptr + 3 * i, tl.load(x_ptr + 3 * i, mask=mask) + 2.0, mask=mask)


# A second version of every_third (same module and name, another source): the kernel page shows both.
_every_third_v2.__qualname__ = "every_third"

# A kernel whose recorded name is markup: every page and picture must show it as text.
HOSTILE_NAME = "<script>window.__pwned=1</script>&amp;<img src=x onerror=alert(1)>"
_hostile_copy.__qualname__ = HOSTILE_NAME
with knobs.runtime.scope():
    knobs.runtime.interpret = False
    hostile = triton.jit(_hostile_copy)
    every_third_v2 = triton.jit(_every_third_v2)
