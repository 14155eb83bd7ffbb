"""The pinned-buffer pool of compiled snapshots (``tilelens.core.compiled.pinned_pool``), with ordinary host memory
standing in for pinned memory (pinning needs CUDA); the pool's bookkeeping is what is tested."""

from __future__ import annotations

import torch

from tilelens.core.compiled.pinned_pool import ALIGN, PinnedPool
from tilelens.core.compiled.snapshots import PendingSnapshots


def _plain(nbytes: int) -> torch.Tensor:
    allocated.append(nbytes)
    return torch.zeros(nbytes, dtype=torch.uint8)


allocated: list[int] = []


def _span(t: torch.Tensor, base: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr() - base.data_ptr()
    return start, start + t.numel() * t.element_size()


def test_slices_are_disjoint_typed_and_a_released_chunk_is_reused() -> None:
    allocated.clear()
    pool = PinnedPool(initial=4096, allocate=_plain, min_chunk=4096)
    base = pool._chunks[0].buf
    a, la = pool.take(100 * 4, torch.float32)
    b, lb = pool.take(7 * 2, torch.bfloat16)
    c, lc = pool.take(ALIGN, torch.uint8)
    assert (a.dtype, a.numel(), b.dtype, b.numel(), c.numel()) == (
        torch.float32,
        100,
        torch.bfloat16,
        7,
        ALIGN,
    )
    spans = sorted(_span(t, base) for t in (a, b, c))
    assert spans == [(0, 400), (ALIGN, ALIGN + 14), (2 * ALIGN, 3 * ALIGN)]  # aligned, never overlapping
    a.fill_(1.0)
    b.fill_(2.0)
    assert a.sum().item() == 100.0 and b.float().sum().item() == 14.0
    assert allocated == [4096] and pool.allocations == 1
    for lease in (la, lb):
        pool.release(lease)
    d, ld = pool.take(64, torch.uint8)  # c still leased: the chunk goes on where it was
    assert _span(d, base)[0] == 3 * ALIGN
    pool.release(lc)
    pool.release(ld)
    e, _ = pool.take(64, torch.uint8)  # every slice released: the chunk starts over
    assert _span(e, base)[0] == 0 and pool.allocations == 1


def test_a_full_pool_grows_geometrically_and_reuses_freed_chunks_before_pinning_more() -> None:
    allocated.clear()
    pool = PinnedPool(allocate=_plain, min_chunk=1024)
    leases = [pool.take(1024, torch.uint8)[1] for _ in range(7)]
    # 1 KiB chunks fill up: each new chunk at least twice the largest so far.
    assert allocated == [1024, 2048, 4096] and pool.pinned_bytes == 7168
    for lease in leases:
        pool.release(lease)
    t, _ = pool.take(3000, torch.uint8)  # fits a freed chunk: nothing pinned
    assert allocated == [1024, 2048, 4096] and t.numel() == 3000
    big, _ = pool.take(10_000, torch.uint8)  # bigger than any chunk: one of its size or twice the largest
    assert allocated[-1] == 10_240 and big.numel() == 10_000


def test_pending_snapshots_give_their_slices_back_once() -> None:
    pool = PinnedPool(initial=4096, allocate=lambda n: torch.zeros(n, dtype=torch.uint8), min_chunk=4096)
    pending = PendingSnapshots(pool=pool)
    for _ in range(3):
        pending.leases.append(pool.take(100, torch.uint8)[1])
    chunk = pool._chunks[0]
    assert chunk.live == 3
    pending.release()
    pending.release()  # idempotent: the writer may call it after a failed write too
    assert chunk.live == 0 and chunk.top == 0


def test_past_its_limit_the_pool_refuses_at_once_and_says_when_the_writer_must_hurry() -> None:
    """Back-pressure: the pool pins at most ``limit`` bytes; a take that would pin more is refused (None, the
    launch keeps no snapshot) instead of waiting; more than half the limit leased is pressure on the writer."""
    allocated.clear()
    pool = PinnedPool(allocate=_plain, min_chunk=1024, limit=4096)
    first = pool.take(1024, torch.uint8)
    second = pool.take(1024, torch.uint8)
    assert first is not None and second is not None
    assert allocated == [1024, 2048] and pool.leased_bytes == 2048 and not pool.under_pressure()
    third = pool.take(1024, torch.uint8)  # the 2 KiB chunk's second half
    assert third is not None and pool.under_pressure()  # 3 KiB of 4 leased
    assert pool.take(2048, torch.uint8) is None  # no chunk has room, pinning 2 KiB more would pass 4 KiB
    assert pool.take(1024, torch.uint8) is not None  # 1 KiB more fits the limit exactly: pinned
    assert pool.take(1, torch.uint8) is None and pool.refused == 2 and pool.pinned_bytes == 4096
    for lease in (first[1], second[1], third[1]):
        pool.release(lease)
    assert pool.leased_bytes == 1024 and not pool.under_pressure()
    again = pool.take(2048, torch.uint8)  # the freed 2 KiB chunk: nothing pinned
    assert again is not None and allocated == [1024, 2048, 1024]


def test_a_dropped_launchs_snapshots_are_not_kept_and_its_slices_go_back() -> None:
    pool = PinnedPool(initial=4096, allocate=lambda n: torch.zeros(n, dtype=torch.uint8), min_chunk=4096)
    pending = PendingSnapshots(pool=pool, dropped=True)
    taken = pool.take(100, torch.uint8)
    assert taken is not None
    pending.before[0] = taken[0]
    pending.leases.append(taken[1])

    class Arg:
        position, before, after = 0, None, None

    arg = Arg()
    pending.finish([arg])  # type: ignore[list-item]
    pending.release()
    assert arg.before is None and arg.after is None and pending.before == {} and pool.leased_bytes == 0
