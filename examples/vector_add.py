"""Masked vector add: the "hello world" of Triton. Run it under `tilelens record examples/vector_add.py`."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = out.numel()
    add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK_SIZE=256)
    return out


def main() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(1000), torch.randn(1000)
    out = add(x, y)
    assert torch.equal(out, x + y)
    print(f"vector_add: {out.numel()} elements, max error {(out - (x + y)).abs().max().item()}")


if __name__ == "__main__":
    main()
