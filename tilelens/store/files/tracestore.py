"""A launch's access trace into the blob store, with the per-argument counts the launch rows keep.

Launches of one kernel on same-shaped inputs usually make the same trace, event for event. Encoding it to
Parquet, hashing it and decoding its lanes for ``distinct_elements`` costs more than a small launch's own
interpretation, so the last few small traces are remembered with their blob and counts: an equal table (Arrow's
``equals``, values compared) reuses them, once its blob is confirmed still on disk (its mtime refreshed, as any
reused blob's is, so ``gc`` leaves it alone).

Invariant: a remembered entry holds exactly what storing its table would give (same bytes, hence same content
address, and the same counts); a table is compared by value, never by identity.
"""

from __future__ import annotations

import pyarrow as pa

from tilelens.store.files.blobs import BlobRef, BlobStore, refresh
from tilelens.store.files.traces import TRACE_WRITE_OPTIONS

_LANE_COLUMNS = {"arg", "lanes", "shape", "strides", "base", "offsets", "mask", "oob_mask"}
RECENT = 4  # traces remembered
SMALL_ROWS = 4096  # only traces up to this many events are remembered (comparing costs what they weigh)


def distinct_elements(trace: pa.Table | None) -> dict[int, int] | None:
    """Per argument, the distinct elements its lanes touched: stored so that ``show`` need not decode traces.

    None (``show`` then computes it from the trace) for a trace without the lane columns, such as a test's.
    """
    if trace is None or not set(trace.column_names) >= _LANE_COLUMNS:
        return None
    from tilelens.store.files.lanes import distinct_elements as count

    return count(trace)


class TraceStore:
    """Stores traces into ``blobs``; ``store`` returns the blob and the distinct-element counts."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self._recent: list[tuple[pa.Table, BlobRef, dict[int, int] | None]] = []

    def store(self, trace: pa.Table | None) -> tuple[BlobRef | None, dict[int, int] | None]:
        if trace is None:
            return None, None
        small = trace.num_rows <= SMALL_ROWS
        if small:
            for known, ref, distinct in reversed(self._recent):
                if known.equals(trace) and refresh(self.blobs.path(ref.sha256)):
                    return ref, distinct
        distinct = distinct_elements(trace)
        ref = self.blobs.store_table(trace, "trace", **TRACE_WRITE_OPTIONS)
        if small:
            self._recent = [*self._recent[-(RECENT - 1) :], (trace, ref, distinct)]
        return ref, distinct

    def forget(self) -> None:
        self._recent.clear()


__all__ = ["TraceStore", "distinct_elements"]
