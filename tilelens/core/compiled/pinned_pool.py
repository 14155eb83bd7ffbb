"""Pinned host memory for compiled snapshots, allocated once per recording and reused.

Pinning memory (``cudaHostAlloc``) costs far more than the copy into it: issue 15 measured 1.8 s extra for a
step whose 2.4 GB of snapshots the copy engine moves in 0.04 s, with one fresh pinned tensor per argument. So a
recording keeps a few large pinned chunks and hands out slices: a bump allocator per chunk, a chunk reused once
every slice of it was released (the writer releases a launch's slices after its bytes are in the blob store).
When no chunk has room a new one is pinned, at least twice the largest so far, so a recording pins O(log n)
times. ``Recording(snapshot_pool_bytes=N)`` pins N bytes when the recording starts instead.

Back-pressure: the pool pins at most ``limit`` bytes (``Recording(snapshot_backlog_bytes=...)``, default
:data:`DEFAULT_LIMIT`). When no chunk has room and pinning another would pass the limit, :meth:`take` returns
None at once: the launch is recorded without snapshots (the recording counts it) rather than the program
waiting for the writer. :meth:`under_pressure` (more than half the limit leased) wakes the writer however busy
the program is. So the program never waits on snapshot memory beyond pinning it, at most ``limit`` bytes over
the recording (docs/gpu-recording.md, "Back-pressure").

Invariant: a slice is never handed out twice while leased: a chunk's bump offset only goes back to 0 when its
live count is 0. Thread-safe (launches take, the writer releases).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch

ALIGN = 512
MIN_CHUNK = 64 << 20
DEFAULT_LIMIT = 2 << 30  # pinned bytes at most, unless the recording asks for more


def pinned(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


@dataclass
class _Chunk:
    buf: torch.Tensor
    size: int
    top: int = 0
    live: int = 0


Lease = tuple[_Chunk, int]  # the chunk a slice came from, and the bytes it took


class PinnedPool:
    def __init__(
        self,
        initial: int = 0,
        allocate: Callable[[int], torch.Tensor] = pinned,
        min_chunk: int = MIN_CHUNK,
        limit: int | None = None,
    ) -> None:
        self._allocate = allocate
        self._min_chunk = min_chunk
        self._chunks: list[_Chunk] = []
        self._current: _Chunk | None = None
        self._lock = threading.Lock()
        self.limit = max(initial, DEFAULT_LIMIT if limit is None else limit)
        self.pinned_bytes = 0
        self.allocations = 0
        self.leased_bytes = 0  # taken and not yet released
        self.released_bytes = 0  # given back over the pool's life: the snapshot bytes the writer consumed
        self.refused = 0  # takes refused: no room and the limit reached
        if initial > 0:
            self._current = self._new_chunk(initial)

    def take(self, nbytes: int, dtype: torch.dtype) -> tuple[torch.Tensor, Lease] | None:
        """A host tensor of ``nbytes`` bytes viewed as ``dtype`` (1-D), and the lease to :meth:`release`; None
        when no chunk has room and pinning another would pass the limit."""
        need = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
        with self._lock:
            chunk = self._current
            if chunk is None or chunk.top + need > chunk.size:
                chunk = self._free_chunk(need)
                if chunk is None:
                    room = self.limit - self.pinned_bytes
                    size = min(
                        room, max(need, self._min_chunk, 2 * max((c.size for c in self._chunks), default=0))
                    )
                    if size < need:
                        self.refused += 1
                        return None
                    chunk = self._new_chunk(size)
                self._current = chunk
            start = chunk.top
            chunk.top += need
            chunk.live += 1
            self.leased_bytes += need
        return chunk.buf[start : start + nbytes].view(dtype), (chunk, need)

    def release(self, lease: Lease) -> None:
        chunk, need = lease
        with self._lock:
            chunk.live -= 1
            self.leased_bytes -= need
            self.released_bytes += need
            if chunk.live == 0:
                chunk.top = 0

    def under_pressure(self) -> bool:
        """More than half the limit is leased: the writer should write now, whatever the program does."""
        return self.leased_bytes * 2 > self.limit

    def _free_chunk(self, need: int) -> _Chunk | None:
        for chunk in self._chunks:
            if chunk.live == 0 and chunk.size >= need:
                chunk.top = 0
                return chunk
        return None

    def _new_chunk(self, size: int) -> _Chunk:
        chunk = _Chunk(self._allocate(size), size)
        self._chunks.append(chunk)
        self.pinned_bytes += size
        self.allocations += 1
        return chunk

    def close(self) -> None:
        with self._lock:
            self._chunks.clear()
            self._current = None
