"""Per-lane views of an access trace, computed over whole columns with numpy.

A trace row is one memory event with its lanes encoded compactly (affine base and strides, or explicit
offsets; packed masks). ``show`` needs per-argument distinct elements and ``export`` needs one row per lane;
decoding row by row in Python would cost seconds on traces with millions of lanes, so the decoding here
works on flat arrays, a bounded number of lanes at a time.

Only Arrow buffers and numpy are used on the ``show`` path: importing ``pyarrow.compute`` alone costs a
quarter of that command's time budget, so it is imported only to write exports.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa

from tilelens.store.files.arrowbuild import array_numbers

#: One row per lane: the flat table ``tilelens export`` writes.
LANE_SCHEMA = pa.schema(
    [
        pa.field("launch_id", pa.int64()),
        pa.field("pid_x", pa.int32()),
        pa.field("pid_y", pa.int32()),
        pa.field("pid_z", pa.int32()),
        pa.field("event", pa.int32()),
        pa.field("op", pa.string()),
        pa.field("arg", pa.int16()),
        pa.field("arg_name", pa.string()),
        pa.field("line", pa.int32()),
        pa.field("lane", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("active", pa.bool_()),
        pa.field("oob", pa.bool_()),
    ]
)

DEFAULT_CHUNK_LANES = 1 << 22


def _exclusive_cumsum(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.size, dtype=np.int64)
    if counts.size > 1:
        np.cumsum(counts[:-1], out=out[1:])
    return out


def _column(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def column_array(table: pa.Table, name: str, dtype: Any) -> np.ndarray:
    return array_numbers(_column(table, name)).astype(dtype, copy=False)


def _validity(arr: pa.Array) -> np.ndarray:
    """Which entries are not null, from the validity bitmap (``Array.is_valid`` needs pyarrow.compute)."""
    n = len(arr)
    if arr.null_count == 0:
        return np.ones(n, dtype=bool)
    bitmap = arr.buffers()[0]
    if bitmap is None:  # a null type: everything is null
        return np.zeros(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + n].astype(bool)


def _list_lengths(arr: pa.Array) -> np.ndarray:
    """Length of every list (0 for a null one)."""
    lengths: np.ndarray = np.diff(array_numbers(arr.offsets)).astype(np.int64)
    lengths[~_validity(arr)] = 0
    return lengths


def _flatten(arr: pa.Array) -> np.ndarray:
    """The values of every non-null list, in order, as int64 (``ListArray.flatten`` needs pyarrow.compute)."""
    offsets = array_numbers(arr.offsets).astype(np.int64)
    lengths = _list_lengths(arr)
    values = array_numbers(arr.values).astype(np.int64, copy=False)
    if lengths.sum() == offsets[-1] - offsets[0]:  # no null list hides values: one contiguous slice
        return cast("np.ndarray", values[offsets[0] : offsets[-1]])
    starts = np.repeat(offsets[:-1], lengths)
    return cast(
        "np.ndarray", values[starts + np.arange(starts.size) - np.repeat(_exclusive_cumsum(lengths), lengths)]
    )


def _padded(col: pa.Array, n: int, width: int, fill: int) -> np.ndarray:
    """A list column as an (n, width) matrix; short or null lists are padded with ``fill``."""
    lengths = _list_lengths(col)
    flat = _flatten(col)
    out = np.full((n, width), fill, dtype=np.int64)
    if flat.size:
        rows = np.repeat(np.arange(n), lengths)
        pos = np.arange(flat.size) - np.repeat(_exclusive_cumsum(lengths), lengths)
        out[rows, pos] = flat
    return out


def string_codes(col: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """A (dictionary-encoded) string column as integer codes and the strings they stand for."""
    index: dict[str, int] = {}
    parts = []
    for chunk in col.chunks:
        if isinstance(chunk, pa.DictionaryArray):
            local = np.array(
                [index.setdefault(v, len(index)) for v in chunk.dictionary.to_pylist()], np.int64
            )
            codes = array_numbers(chunk.indices).astype(np.int64)
            parts.append(local[codes] if local.size else codes)
        else:
            parts.append(np.array([index.setdefault(v, len(index)) for v in chunk.to_pylist()], np.int64))
    codes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return codes, list(index)


@dataclass
class _Bits:
    """A column of packed bit masks (numpy.packbits order), one per row, null meaning "no mask"."""

    valid: np.ndarray
    data: np.ndarray
    starts: np.ndarray

    @classmethod
    def of(cls, col: pa.Array) -> _Bits:
        valid = _validity(col)
        buffers = col.buffers()
        width = np.int64 if pa.types.is_large_binary(col.type) else np.int32
        if buffers[1] is None:
            starts = np.zeros(len(col), dtype=np.int64)
        else:
            offsets = np.frombuffer(buffers[1], dtype=width)[col.offset : col.offset + len(col) + 1]
            starts = offsets[:-1].astype(np.int64)
        data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
        return cls(valid, data, starts)

    def lanes(self, row: np.ndarray, lane: np.ndarray, default: bool) -> np.ndarray:
        out = np.full(row.size, default, dtype=bool)
        has = self.valid[row]
        if has.any():
            bit = self.starts[row[has]] * 8 + lane[has]
            out[has] = (self.data[bit >> 3] >> (7 - (bit & 7)).astype(np.uint8)) & 1 == 1
        return out


@dataclass
class LaneChunk:
    """Lanes of consecutive trace rows: ``row`` indexes the trace, ``lane`` is the C-order index in its block."""

    row: np.ndarray
    lane: np.ndarray
    offset: np.ndarray
    active: np.ndarray
    oob: np.ndarray


class LaneDecoder:
    """Decodes every lane's element offset, mask and out-of-bounds bit of a trace table."""

    def __init__(self, trace: pa.Table) -> None:
        self.trace = trace
        n = self.rows = trace.num_rows
        self.lanes = column_array(trace, "lanes", np.int64)
        shape = _column(trace, "shape")
        ndim = _list_lengths(shape)
        width = max(1, int(ndim.max()) if n else 1)
        # Trailing padding with size-1 axes and zero strides leaves C-order unravelling unchanged.
        self.shape = _padded(shape, n, width, 1)
        self.strides = _padded(_column(trace, "strides"), n, width, 0)
        self.base = column_array(trace, "base", np.int64)
        suffix = np.ones((n, width), dtype=np.int64)
        for axis in range(width - 2, -1, -1):
            suffix[:, axis] = suffix[:, axis + 1] * self.shape[:, axis + 1]
        self.suffix = suffix
        offsets = _column(trace, "offsets")
        self.irregular = _validity(offsets)
        self.irregular_values = _flatten(offsets)
        self.irregular_starts = _exclusive_cumsum(_list_lengths(offsets))
        self.mask = _Bits.of(_column(trace, "mask"))
        self.oob_mask = _Bits.of(_column(trace, "oob_mask"))

    def chunks(self, max_lanes: int = DEFAULT_CHUNK_LANES) -> Iterator[LaneChunk]:
        """Consecutive rows with at most ``max_lanes`` lanes together (a larger single row stays whole)."""
        return self.chunks_of(np.arange(self.rows, dtype=np.int64), max_lanes)

    def decode(self, start: int, stop: int) -> LaneChunk:
        return self.decode_rows(np.arange(start, stop, dtype=np.int64))

    def spans(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The lowest and highest element offset of any lane (masked-off ones too) of each of ``rows``, without
        decoding lanes where the row is affine: a reader can tell rows that cannot touch the same element."""
        extent = (self.shape[rows] - 1) * self.strides[rows]
        low = self.base[rows] + np.minimum(extent, 0).sum(axis=1)
        high = self.base[rows] + np.maximum(extent, 0).sum(axis=1)
        irregular = np.flatnonzero(self.irregular[rows] & (self.lanes[rows] > 0))
        if irregular.size:
            picked = rows[irregular]
            counts = self.lanes[picked]
            at = _exclusive_cumsum(counts)  # each row's values, gathered one after another
            values = self.irregular_values[
                np.repeat(self.irregular_starts[picked] - at, counts) + np.arange(int(counts.sum()))
            ]
            low[irregular] = np.minimum.reduceat(values, at)
            high[irregular] = np.maximum.reduceat(values, at)
        return low, high

    def chunks_of(self, rows: np.ndarray, max_lanes: int = DEFAULT_CHUNK_LANES) -> Iterator[LaneChunk]:
        """The lanes of the trace rows ``rows`` (any order), at most ``max_lanes`` at a time (a larger row
        stays whole): a reader that needs a few rows of a large trace decodes those alone."""
        ends = np.cumsum(self.lanes[rows])
        start = 0
        while start < rows.size:
            done = int(ends[start - 1]) if start else 0
            stop = int(np.searchsorted(ends, done + max_lanes, side="right"))
            stop = min(rows.size, max(stop, start + 1))
            yield self.decode_rows(rows[start:stop])
            start = stop

    def decode_rows(self, rows: np.ndarray) -> LaneChunk:
        """Every lane of the trace rows ``rows``, row after row in the order given."""
        counts = self.lanes[rows]
        row = np.repeat(rows.astype(np.int64, copy=False), counts)
        lane = np.arange(row.size, dtype=np.int64) - np.repeat(_exclusive_cumsum(counts), counts)
        # Row-level values repeated per lane (cheaper than gathering them lane by lane); an axis of stride 0
        # in every row adds nothing, the first axis needs no modulo and the last no division (suffix 1).
        offset = np.repeat(self.base[rows], counts)
        width = self.shape.shape[1]
        for axis in range(width):
            strides = self.strides[rows, axis]
            if not strides.any():
                continue
            index = lane if axis == width - 1 else lane // np.repeat(self.suffix[rows, axis], counts)
            if axis > 0:
                index = index % np.repeat(self.shape[rows, axis], counts)
            offset += index * np.repeat(strides, counts)
        irregular = self.irregular[row]
        if irregular.any():
            rows = row[irregular]
            offset[irregular] = self.irregular_values[self.irregular_starts[rows] + lane[irregular]]
        return LaneChunk(
            row=row,
            lane=lane,
            offset=offset,
            active=self.mask.lanes(row, lane, default=True),
            oob=self.oob_mask.lanes(row, lane, default=False),
        )


def distinct_elements(trace: pa.Table, max_lanes: int = DEFAULT_CHUNK_LANES) -> dict[int, int]:
    """Per argument position: how many distinct elements its active, in-bounds lanes touched."""
    if trace.num_rows == 0:
        return {}
    decoder = LaneDecoder(trace)
    arg = column_array(trace, "arg", np.int64)
    seen: dict[int, list[np.ndarray]] = {}
    for chunk in decoder.chunks(max_lanes):
        keep = chunk.active & ~chunk.oob
        args = arg[chunk.row]
        for position in np.unique(args[keep]):
            if position < 0:
                continue
            values = np.unique(chunk.offset[keep & (args == position)])
            parts = seen.setdefault(int(position), [])
            parts.append(values)
            if len(parts) > 8:  # fold early so memory stays bounded by the distinct count
                parts[:] = [np.unique(np.concatenate(parts))]
    return {position: int(np.unique(np.concatenate(parts)).size) for position, parts in seen.items()}


def op_kind(op: str) -> str:
    """load, store or atomic: the three columns of per-line counts."""
    return "atomic" if op.startswith("atomic") else op


@dataclass
class LineCounts:
    """Lanes that were active in each kind of access on one kernel source line."""

    line: int
    load_lanes: int = 0
    store_lanes: int = 0
    atomic_lanes: int = 0
    events: int = 0
    oob_lanes: int = 0  # active lanes outside their argument: the line is drawn red


def line_counts(trace: pa.Table) -> dict[int, LineCounts]:
    if trace.num_rows == 0:
        return {}
    line = column_array(trace, "line", np.int64)
    active = column_array(trace, "active", np.int64)
    codes, names = string_codes(trace.column("op"))
    kinds = np.array([op_kind(str(v)) for v in names], dtype=object)
    lines, inverse = np.unique(line, return_inverse=True)
    out = {int(v): LineCounts(int(v)) for v in lines}
    events = np.bincount(inverse, minlength=lines.size)
    for kind in ("load", "store", "atomic"):
        selected = (kinds[codes] == kind) if kinds.size else np.zeros(line.size, dtype=bool)
        sums = np.bincount(inverse, weights=np.where(selected, active, 0), minlength=lines.size)
        for i, v in enumerate(lines):
            setattr(out[int(v)], f"{kind}_lanes", int(sums[i]))
    oob = np.bincount(inverse, weights=column_array(trace, "oob", np.int64), minlength=lines.size)
    for i, v in enumerate(lines):
        out[int(v)].events = int(events[i])
        out[int(v)].oob_lanes = int(oob[i])
    return out


@dataclass
class OobRows:
    """The first trace rows with out-of-bounds lanes and how many such rows there are.

    Each row is a dict of the trace's columns plus ``oob_offsets``: the smallest and largest element offset
    of its out-of-bounds lanes (None if the row has none).
    """

    total: int
    rows: list[dict[str, Any]] = field(default_factory=list)


def oob_rows(trace: pa.Table, first: int) -> OobRows:
    if trace.num_rows == 0:
        return OobRows(0)
    hits = np.flatnonzero(column_array(trace, "oob", np.int64) > 0)
    if not hits.size or first <= 0:
        return OobRows(int(hits.size))
    decoder = LaneDecoder(trace)
    rows = []
    for i in hits[:first]:
        row = trace.slice(int(i), 1).to_pylist()[0]
        lanes = decoder.decode(int(i), int(i) + 1)
        outside = lanes.offset[lanes.oob]
        row["oob_offsets"] = (int(outside.min()), int(outside.max())) if outside.size else None
        rows.append(row)
    return OobRows(int(hits.size), rows)


def lane_table(
    trace: pa.Table,
    launch_id: int,
    arg_names: dict[int, str],
    max_lanes: int = DEFAULT_CHUNK_LANES,
) -> Iterator[pa.RecordBatch]:
    """The trace as :data:`LANE_SCHEMA` record batches, one lane per row."""
    if trace.num_rows == 0:
        return
    decoder = LaneDecoder(trace)
    pid = [column_array(trace, name, np.int32) for name in ("pid_x", "pid_y", "pid_z")]
    event = column_array(trace, "event", np.int32)
    arg = column_array(trace, "arg", np.int16)
    line = column_array(trace, "line", np.int32)
    op_codes, op_names = string_codes(trace.column("op"))
    ops = pa.array(op_names, type=pa.string())
    names, name_codes = _arg_dictionary(arg, arg_names)
    for chunk in decoder.chunks(max_lanes):
        r = chunk.row
        columns = [
            pa.array(np.full(r.size, launch_id, dtype=np.int64)),
            pa.array(pid[0][r]),
            pa.array(pid[1][r]),
            pa.array(pid[2][r]),
            pa.array(event[r]),
            pa.DictionaryArray.from_arrays(pa.array(op_codes[r].astype(np.int32)), ops).cast(pa.string()),
            pa.array(arg[r]),
            pa.DictionaryArray.from_arrays(pa.array(name_codes[r]), names).cast(pa.string()),
            pa.array(line[r]),
            pa.array(chunk.lane.astype(np.int32)),
            pa.array(chunk.offset),
            pa.array(chunk.active),
            pa.array(chunk.oob),
        ]
        yield pa.RecordBatch.from_arrays(columns, schema=LANE_SCHEMA)


def _arg_dictionary(arg: np.ndarray, arg_names: dict[int, str]) -> tuple[pa.Array, np.ndarray]:
    """Dictionary-encode argument names per trace row; rows of no argument (or an unknown one) get null."""
    positions: Sequence[int] = sorted(arg_names)
    names = pa.array([arg_names[p] for p in positions] + [None], type=pa.string())
    lookup = {p: i for i, p in enumerate(positions)}
    missing = len(positions)
    unique, inverse = np.unique(arg, return_inverse=True)
    codes = np.array([lookup.get(int(p), missing) for p in unique], dtype=np.int32)[inverse]
    return names, codes
