"""The old bytes of every lane an interpreted launch writes, taken just before the write.

Two users need what memory held before a launch wrote it, without copying whole tensors first:

* the grid-batched engine, which must put memory back exactly as it was when it gives up part way and runs the
  launch again one program at a time (``rollback``);
* snapshots proportional to what a launch touches: the before-value of an overwritten element is the old value
  its first write found (``entries``, oldest first).

Invariants:

* ``note`` runs before the interpreter's own store/atomic method, for the lanes that method will write: active,
  not stray (a stray lane is never dereferenced, see :mod:`tilelens.core.engine.bounds`), so every noted lane lies
  inside one argument's storage and reading it is safe;
* entries are kept in write order; ``rollback`` applies them newest first, so each byte ends with the value it
  had before the launch's first write to it, whatever the launch wrote in between (a lane written twice in one
  call read the same old bytes for both copies, so duplicates are harmless);
* the log holds copies of the old bytes, never references to live memory, and references to the interpreter's
  address arrays, which the interpreter never modifies after creating them; evenly spaced lanes are kept as
  (first address, step) instead (``WriteEntry.lanes``; ``addrs`` rebuilds them), so a log of whole-tensor
  stores holds about the bytes it overwrote, not eight more per lane.
"""

from __future__ import annotations

import bisect
import ctypes
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tilelens.core.kernel.spans import StorageTable
from tilelens.errors import StateError


@dataclass(frozen=True)
class WriteEntry:
    """One write's lanes: their first byte addresses and the ``elem_bytes`` bytes each held before it.

    Lanes at evenly spaced addresses (a contiguous or strided 1-D block, the common store) keep only the first
    address and the spacing, not eight bytes per lane: ``addrs`` rebuilds them when asked.
    """

    lanes: np.ndarray | tuple[int, int]  # uint64 addresses, one per written lane; or (first, step)
    old: np.ndarray  # uint8, shape (lanes, elem_bytes)

    @property
    def addrs(self) -> np.ndarray:
        if isinstance(self.lanes, np.ndarray):
            return self.lanes
        first, step = self.lanes
        out: np.ndarray = np.arange(self.old.shape[0], dtype=np.uint64) * np.uint64(step) + np.uint64(first)
        return out


def _compact(flat: np.ndarray) -> np.ndarray | tuple[int, int]:
    """(first, step) when ``flat`` is an arithmetic progression with a non-negative step, else ``flat``."""
    if flat.size < 8 or flat[1] < flat[0]:  # checked first: a uint64 step below zero would wrap
        return flat
    step = flat[1] - flat[0]
    if not bool((np.diff(flat) == step).all()):  # a later step below zero wraps, and differs
        return flat
    return (int(flat[0]), int(step))


def _memory(start: int, end: int) -> np.ndarray:
    """A writable uint8 view of ``[start, end)``: one argument storage, alive for the length of the launch."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * (end - start)).from_address(start))


_TYPED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class WriteLog:
    """Collects the old bytes of the lanes a launch writes; can put them back.

    Gathering and putting back take the cheapest of three routes, all moving exactly the same bytes:

    * lanes at evenly spaced addresses inside one storage (a contiguous or strided block, the common store):
      a strided window over that storage, copied or assigned at once;
    * lanes inside one storage at offsets that are multiples of their width (1, 2, 4 or 8 bytes), from a
      storage start aligned to it: the storage seen as unsigned integers of that width, indexed once;
    * anything else (lanes spread over several storages, misaligned lanes): byte by byte, per storage.
    """

    def __init__(self) -> None:
        self._entries: list[WriteEntry] = []
        self._views: dict[int, np.ndarray] = {}  # storage start -> view of that storage
        self.bytes = 0  # old bytes held
        # False once a write could not be noted (its storages unknown): ``rollback`` then refuses.
        self.complete = True
        self._storage: StorageTable | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def _lanes(
        self, storage: StorageTable, addrs: np.ndarray, elem_bytes: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per lane: the index of its storage interval and its byte offset in it."""
        idx = np.searchsorted(storage.np_starts, addrs, side="right").astype(np.int64) - 1
        if (idx < 0).any() or (addrs > storage.np_ends[idx] - np.uint64(elem_bytes)).any():
            raise ValueError("WriteLog: a noted lane lies outside every argument storage")
        return idx, (addrs - storage.np_starts[idx]).astype(np.int64)

    def _view(self, storage: StorageTable, i: int) -> np.ndarray:
        start = storage.starts[i]
        view = self._views.get(start)
        if view is None or view.size != storage.ends[i] - start:
            view = self._views[start] = _memory(start, storage.ends[i])
        return view

    def _one_storage(self, storage: StorageTable, lo: int, hi: int) -> int | None:
        """The storage interval holding every byte of ``[lo, hi)``, or None when no single one does."""
        i = bisect.bisect_right(storage.starts, lo) - 1
        return i if i >= 0 and hi <= storage.ends[i] else None

    def _window(
        self, storage: StorageTable, lanes: tuple[int, int], n: int, elem_bytes: int
    ) -> np.ndarray | None:
        """A (n, elem_bytes) view of live memory over evenly spaced lanes in one storage, else None."""
        first, step = lanes
        i = self._one_storage(storage, first, first + (n - 1) * step + elem_bytes)
        if i is None:
            return None
        view = self._view(storage, i)
        offset = first - storage.starts[i]
        # Every byte of the window lies in ``view`` (checked just above): the strides stay inside it.
        return np.lib.stride_tricks.as_strided(view[offset:], shape=(n, elem_bytes), strides=(step, 1))

    def _typed(
        self, storage: StorageTable, addrs: np.ndarray, elem_bytes: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(the storage as unsigned ints of ``elem_bytes``, each lane's index in it) when every lane lies in
        one storage at an offset that is a multiple of its width, from an aligned storage start; else None."""
        typed = _TYPED.get(elem_bytes)
        if typed is None or addrs.size == 0:
            return None
        i = self._one_storage(storage, int(addrs.min()), int(addrs.max()) + elem_bytes)
        if i is None or storage.starts[i] % elem_bytes:
            return None
        offsets = addrs - np.uint64(storage.starts[i])
        if elem_bytes > 1 and (offsets & np.uint64(elem_bytes - 1)).any():
            return None
        view = self._view(storage, i)
        words = view[: view.size - view.size % elem_bytes].view(typed)
        return words, (offsets // np.uint64(elem_bytes)).astype(np.intp)

    def _old_bytes(
        self, storage: StorageTable, addrs: np.ndarray, lanes: np.ndarray | tuple[int, int], elem_bytes: int
    ) -> np.ndarray:
        """The current bytes of ``addrs``' lanes, by the cheapest route (class docstring)."""
        if isinstance(lanes, tuple):
            window = self._window(storage, lanes, addrs.size, elem_bytes)
            if window is not None:
                copied: np.ndarray = window.copy()
                return copied
        typed = self._typed(storage, addrs, elem_bytes)
        if typed is not None:
            words, index = typed
            picked: np.ndarray = words[index].view(np.uint8).reshape(addrs.size, elem_bytes)
            return picked
        return self._gather(storage, addrs, elem_bytes)

    def _gather(self, storage: StorageTable, addrs: np.ndarray, elem_bytes: int) -> np.ndarray:
        """The lane-by-lane route: every byte of every lane indexed, storage by storage."""
        idx, offsets = self._lanes(storage, addrs, elem_bytes)
        old = np.empty((addrs.size, elem_bytes), dtype=np.uint8)
        spread = np.arange(elem_bytes, dtype=np.int64)
        for i in np.unique(idx).tolist():
            sel = idx == i
            old[sel] = self._view(storage, int(i))[offsets[sel, None] + spread]
        return old

    def _scatter(self, storage: StorageTable, entry: WriteEntry) -> None:
        """Write ``entry.old`` back over its lanes, by the route ``_old_bytes`` would take."""
        old = entry.old
        n, elem_bytes = old.shape
        if isinstance(entry.lanes, tuple):
            window = self._window(storage, entry.lanes, n, elem_bytes)
            if window is not None:
                # Lanes that overlap (a step below the width) hold equal copies of the bytes they share, all
                # read at the same moment: whichever copy lands last, each byte gets its old value.
                window[...] = old
                return
        addrs = entry.addrs
        typed = self._typed(storage, addrs, elem_bytes)
        if typed is not None:
            words, index = typed
            words[index] = np.ascontiguousarray(old).reshape(-1).view(words.dtype)
            return
        idx, offsets = self._lanes(storage, addrs, elem_bytes)
        spread = np.arange(elem_bytes, dtype=np.int64)
        for i in np.unique(idx).tolist():
            sel = idx == i
            self._view(storage, int(i))[offsets[sel, None] + spread] = old[sel]

    def note(
        self, storage: StorageTable | None, addrs: np.ndarray, active: np.ndarray | None, elem_bytes: int
    ) -> None:
        """Keep the current bytes of the ``active`` lanes of ``addrs`` (None: all), about to be written.

        ``storage`` None (the argument storages not known, which the launch's first pre-run hook settles) marks
        the log incomplete instead of failing the user's launch.
        """
        if storage is None:
            self.complete = False
            return
        flat = np.asarray(addrs).reshape(-1).astype(np.uint64, copy=False)
        if active is not None:
            keep = np.broadcast_to(np.asarray(active, dtype=bool), np.shape(addrs)).reshape(-1)
            if not keep.all():
                flat = flat[keep]
        if flat.size == 0:
            return
        lanes = _compact(flat)
        old = self._old_bytes(storage, flat, lanes, elem_bytes)
        self._entries.append(WriteEntry(lanes, old))
        self.bytes += old.size
        self._storage = storage

    def entries(self) -> Iterator[WriteEntry]:
        """The writes in the order they happened."""
        return iter(self._entries)

    def rollback(self) -> None:
        """Put every noted lane back to the bytes it held before the launch's first write to it; empties the log."""
        if not self.complete:
            raise StateError("WriteLog: a write could not be noted; memory cannot be put back")
        storage = self._storage
        if storage is None:
            return
        for entry in reversed(self._entries):
            self._scatter(storage, entry)
        self._entries.clear()
        self.bytes = 0
