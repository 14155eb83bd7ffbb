"""Kernels for ``tilelens coverage`` (tests/end_to_end/test_cli_coverage.py), and a recording of them.

Each kernel has one shape of control flow: a constexpr branch whose one side no launch takes, a branch on a
loaded value that some programs take (the batched engine gives up there and the programs run one by one), a
loop, and masked accesses whose tail some launches exercise and others never do. Lines are found by their
text (:func:`line_of`), so the tests hold when lines move.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import triton
import triton.language as tl


@triton.jit
def constexpr_branch(x_ptr, out_ptr, n, BLOCK: tl.constexpr, DOUBLE: tl.constexpr):
    """Doubles or copies a masked block; every launch passes DOUBLE=True."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if DOUBLE:  # noqa: SIM108 (a compile-time branch)
        y = x * 2  # constexpr taken
    else:
        y = x + 0  # constexpr never
    tl.store(out_ptr + offs, y, mask=mask)


@triton.jit
def value_branch(x_ptr, flag_ptr, out_ptr, BLOCK: tl.constexpr):
    """Program p negates its block when flag[p] > 0, else copies it; flag is never above 100."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    flag = tl.load(flag_ptr + pid)
    if flag > 100:
        x = x * 0  # value never
    if flag > 0:
        tl.store(out_ptr + offs, -x)  # value some
    else:
        tl.store(out_ptr + offs, x)  # value others


@triton.jit
def loop_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """One program sums n elements, BLOCK at a time; the last block is partial unless BLOCK divides n."""
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)  # loop load
    tl.store(out_ptr, tl.sum(acc, axis=0))


@triton.jit
def full_tail(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """A masked copy launched only with n a multiple of BLOCK: its masks are always full."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)  # full load
    tl.store(
        out_ptr + offs,
        x + 1,
        mask=offs < n,
    )  # full store


@triton.jit
def load_block(ptr, offs, n):
    return tl.load(ptr + offs, mask=offs < n)  # helper load


@triton.jit
def with_helper(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Loads through a helper: its events are at the helper's line, outside this function."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = load_block(x_ptr, offs, n)  # helper call
    tl.store(out_ptr + offs, x, mask=offs < n)


def line_of(text: str) -> int:
    """The line number in this file of the first line containing ``text``."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@dataclass(frozen=True)
class Recorded:
    db: Path | str  # a SQLite file, or a database URL
    blobs: Path
    run_id: int


def launch_all() -> None:
    """Every kernel above, as the tests expect them launched (see each comment); asserts their results."""
    import torch

    from tilelens.core import session

    try:
        session.set_nodeid("tests/test_fake.py::test_one")
        x = torch.arange(40.0)
        out = torch.zeros(40)
        constexpr_branch[(3,)](x, out, 40, BLOCK=16, DOUBLE=True)  # 40 = 2 * 16 + 8: a partial tail
        assert torch.equal(out, 2 * x)
        flags = torch.tensor([1, 0, 5, 0], dtype=torch.int32)
        x = torch.arange(32.0)
        out = torch.zeros(32)
        value_branch[(4,)](x, flags, out, BLOCK=8)  # programs 0 and 2 negate, 1 and 3 copy
        assert torch.equal(out, torch.cat([-x[:8], x[8:16], -x[16:24], x[24:]]))
        session.set_nodeid("tests/test_fake.py::test_two")
        total = torch.zeros(1)
        loop_sum[(1,)](torch.ones(20), total, 20, BLOCK=8)  # 3 iterations, the last partial (4 of 8)
        assert total.item() == 20.0
        out = torch.zeros(32)
        full_tail[(2,)](torch.ones(32), out, 32, BLOCK=16)  # 32 = 2 * 16: never a partial tail
        full_tail[(4,)](torch.ones(64), torch.zeros(64), 64, BLOCK=16)
        assert torch.equal(out, torch.full((32,), 2.0))
    finally:
        session.set_nodeid(None)


def record(folder: Path, coverage: bool = True, db: str | None = None) -> Recorded:
    """:func:`launch_all` recorded into a history in ``folder`` (or database ``db``, blobs in ``folder``),
    executed lines kept when ``coverage``."""
    import tilelens

    where: Path | str = db if db is not None else folder / "h.db"
    blobs = folder / "blobs"
    with tilelens.record(str(where), blobs, coverage=coverage) as rec:
        launch_all()
    assert rec.run_id is not None
    return Recorded(where, blobs, rec.run_id)
