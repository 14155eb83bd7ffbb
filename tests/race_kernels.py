"""Kernels for ``tilelens check``: one per kind of finding, and clean ones. Decorated in compiled mode (see
tests/kernels.py for why). ``record`` launches each once into a history and names its launch."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import triton
import triton.language as tl
from triton import knobs

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def disjoint_blocks(x_ptr, y_ptr, n, BLOCK: tl.constexpr):  # clean: each program its own block
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, v * 2.0, mask=offs < n)

    @triton.jit
    def shared_inputs(w_ptr, x_ptr, out_ptr, N: tl.constexpr):  # clean: every program reads all of w
        cols = tl.arange(0, N)
        w = tl.load(w_ptr + cols)
        x = tl.load(x_ptr + tl.program_id(0) * N + cols)
        tl.store(out_ptr + tl.program_id(0) * N + cols, w * x)

    @triton.jit
    def in_place(x_ptr, BLOCK: tl.constexpr):  # clean: each program reads and writes its own elements
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1.0)

    @triton.jit
    def atomic_total(x_ptr, total_ptr, BLOCK: tl.constexpr):  # clean: every program adds atomically
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.atomic_add(total_ptr + tl.arange(0, BLOCK), tl.load(x_ptr + offs))

    @triton.jit
    def locked_accumulate(x_ptr, acc_ptr, lock_ptr, N: tl.constexpr, GROUPS: tl.constexpr):
        # clean: Triton's layer-norm backward pattern, programs of a group serialised by a spin lock
        pid = tl.program_id(0)
        group = pid % GROUPS
        lock = lock_ptr + group
        count = lock_ptr + GROUPS + group
        cols = tl.arange(0, N)
        part = tl.load(x_ptr + pid * N + cols)
        while tl.atomic_cas(lock, 0, 1) == 1:
            pass
        if tl.load(count) == 0:
            tl.atomic_xchg(count, 1)
        else:
            part += tl.load(acc_ptr + group * N + cols)
        tl.store(acc_ptr + group * N + cols, part)
        tl.atomic_xchg(lock, 0)

    @triton.jit
    def same_block(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + tl.program_id(0) * BLOCK + offs)
        tl.store(y_ptr + offs, v)  # BUG: every program stores the same block of y

    @triton.jit
    def shift_in_place(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs + 1, mask=offs + 1 < n)  # BUG: reads the next program's first element
        tl.store(x_ptr + offs, v, mask=offs < n)

    @triton.jit
    def plain_and_atomic(x_ptr, total_ptr, seen_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.atomic_add(total_ptr, tl.sum(tl.load(x_ptr + offs), axis=0))
        tl.store(seen_ptr + tl.program_id(0), tl.load(total_ptr))  # BUG: plain read of an atomic total

    @triton.jit
    def own_lock(x_ptr, acc_ptr, lock_ptr, N: tl.constexpr):
        lock = lock_ptr + tl.program_id(0)  # BUG: each program takes a lock of its own
        cols = tl.arange(0, N)
        part = tl.load(x_ptr + tl.program_id(0) * N + cols)
        while tl.atomic_cas(lock, 0, 1) == 1:
            pass
        total = tl.load(acc_ptr + cols) + part
        tl.store(acc_ptr + cols, total)
        tl.atomic_xchg(lock, 0)

    @triton.jit
    def tail_copy(x_ptr, y_ptr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs))  # BUG: no mask, x and y are shorter than 3 blocks


def line_of(text: str) -> int:
    """The line number in this file of the first line containing ``text``."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@dataclass(frozen=True)
class Recorded:
    db: Path
    blobs: Path
    launches: dict[str, int]  # kernel name -> its launch
    run_id: int


def record(folder: Path) -> Recorded:
    """Each kernel above launched once (the buggy ones last) into a history in ``folder``."""
    import torch

    import tilelens

    db, blobs = folder / "h.db", folder / "blobs"
    ids: dict[str, int] = {}
    with tilelens.record(str(db), blobs) as rec:

        def launch(name: str, kernel: object, grid: tuple[int, ...], *args: object, **kw: object) -> None:
            kernel[grid](*args, **kw)  # type: ignore[index]
            ids[name] = rec.launch_ids[-1]

        launch("disjoint_blocks", disjoint_blocks, (4,), torch.ones(60), torch.zeros(60), 60, BLOCK=16)
        launch("shared_inputs", shared_inputs, (4,), torch.ones(8), torch.ones(32), torch.zeros(32), N=8)
        launch("in_place", in_place, (4,), torch.zeros(32), BLOCK=8)
        launch("atomic_total", atomic_total, (4,), torch.ones(32), torch.zeros(8), BLOCK=8)
        acc, locks = torch.zeros(2 * 8), torch.zeros(4, dtype=torch.int32)
        launch("locked_accumulate", locked_accumulate, (6,), torch.ones(48), acc, locks, N=8, GROUPS=2)
        assert acc.tolist() == [3.0] * 16 and locks.tolist() == [0, 0, 1, 1]
        launch("same_block", same_block, (4,), torch.ones(64), torch.zeros(16), BLOCK=16)
        launch("shift_in_place", shift_in_place, (4,), torch.arange(64.0), 64, BLOCK=16)
        total = torch.zeros(1)
        launch("plain_and_atomic", plain_and_atomic, (4,), torch.ones(32), total, torch.zeros(4), BLOCK=8)
        launch(
            "own_lock", own_lock, (3,), torch.ones(24), torch.zeros(8), torch.zeros(3, dtype=torch.int32), N=8
        )
        x, y = torch.ones(48), torch.zeros(48)
        launch("tail_copy", tail_copy, (3,), x[:40], y[:40], BLOCK=16)
    assert rec.run_id is not None
    return Recorded(db, blobs, ids, rec.run_id)
