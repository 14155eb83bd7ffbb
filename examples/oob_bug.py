"""A kernel with a bug: the load has no mask, so the last block reads past the end of `x`.

The result is still right (the stray lanes are never stored), which is exactly why such bugs survive:
`tilelens show` on this launch lists the out-of-bounds lanes, their program and source line.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def shift_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)  # BUG: missing `mask=offsets < n`
    tl.store(out_ptr + offsets, x + 1.0, mask=offsets < n)


def main() -> None:
    buffer = torch.zeros(256)
    x = buffer[:200]  # the lanes past x read the rest of `buffer`, memory no argument owns
    x.copy_(torch.arange(200, dtype=torch.float32))
    out = torch.empty(200)
    shift_kernel[(triton.cdiv(200, 64),)](x, out, 200, BLOCK_SIZE=64)
    assert torch.equal(out, x + 1.0)
    print("oob_bug: output looks right, but 56 lanes read past the end of x")


if __name__ == "__main__":
    main()
