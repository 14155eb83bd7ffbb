"""`@triton.heuristics` picks the block size and whether the last block needs a mask."""

import torch
import triton
import triton.language as tl


@triton.heuristics(
    {
        "BLOCK_SIZE": lambda args: min(triton.next_power_of_2(args["n"]), 128),
        "EVEN": lambda args: args["n"] % min(triton.next_power_of_2(args["n"]), 128) == 0,
    }
)
@triton.jit
def scale_kernel(x_ptr, out_ptr, alpha, n, BLOCK_SIZE: tl.constexpr, EVEN: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    if EVEN:  # noqa: SIM108 (a compile-time branch)
        x = tl.load(x_ptr + offsets)
    else:
        x = tl.load(x_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + offsets, alpha * x, mask=offsets < n)


def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, out, alpha, n)
    return out


def main() -> None:
    torch.manual_seed(0)
    for n in (256, 300):
        x = torch.randn(n)
        torch.testing.assert_close(scale(x, 0.5), 0.5 * x)
    print("heuristics_scale: 2 sizes, one even and one ragged")


if __name__ == "__main__":
    main()
