"""Kernels that touch a few elements of a large tensor (a KV-cache update), and one that touches all of it:
the sparse-snapshot tests (tests/unit/test_sparse_snapshots.py) record them."""

from __future__ import annotations

import triton
import triton.language as tl
from triton import knobs

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def kv_update_kernel(cache_ptr, new_ptr, pos, BLOCK: tl.constexpr):
        # Reads and rewrites BLOCK cache elements from ``pos``: a KV-cache append touching a sliver of the cache.
        offs = tl.arange(0, BLOCK)
        new = tl.load(new_ptr + offs)
        old = tl.load(cache_ptr + pos + offs)
        tl.store(cache_ptr + pos + offs, old * 0.5 + new)

    @triton.jit
    def kv_read_kernel(cache_ptr, out_ptr, pos, BLOCK: tl.constexpr):
        # Reads BLOCK cache elements, writes none of the cache.
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(cache_ptr + pos + offs) + 1.0)

    @triton.jit
    def scale_all_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)

    @triton.jit
    def atomic_kernel(x_ptr, at):
        # Every program adds 1 to element ``at`` and 2 to the next: the same elements written many times.
        offs = tl.arange(0, 2)
        tl.atomic_add(x_ptr + at + offs, (offs + 1).to(tl.float32))
