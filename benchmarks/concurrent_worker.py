"""One of the processes of the concurrency benchmark: records N small launches into a shared history."""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

import tilelens


@triton.jit
def fill_kernel(out_ptr, value, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32) + value, mask=offs < n)


def main() -> None:
    db, blobs, count, worker = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    out = torch.empty(1000)
    with tilelens.record(db=db, blobs=blobs, tag=f"worker-{worker}"):
        for i in range(count):
            fill_kernel[(triton.cdiv(1000, 256),)](out, float(worker * 1000 + i), 1000, BLOCK=256)
            assert out[0].item() == worker * 1000 + i


if __name__ == "__main__":
    main()
