"""Arrow arrays built from their buffers, without ``pyarrow.array``.

``pyarrow.array`` asks its pandas shim whether the input is a pandas object, and the shim imports pandas to
answer: on the first recorded launch of a process that costs ~0.4 s and ~50 MiB of resident memory (more than
the whole launch), for tables that never see pandas. The record path (trace encoding, tensor and sparse snapshot
codecs) builds its arrays here instead, from numpy buffers; the result is the same Arrow data, so the bytes
written (and every content address) are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

_NUMPY: dict[pa.DataType, Any] = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
}


_BOOL_ID = pa.bool_().id


def _validity(present: np.ndarray) -> pa.Buffer | None:
    if present.all():
        return None
    return pa.py_buffer(np.packbits(present, bitorder="little"))


def numbers(values: Sequence[Any] | np.ndarray, type: pa.DataType) -> pa.Array:
    """A non-null fixed-width (integer or float) or bool array."""
    if type.id == _BOOL_ID:  # pa.types.is_boolean costs more than the small arrays built here
        flags = np.asarray(values, dtype=bool)
        bits = np.packbits(flags, bitorder="little")
        return pa.Array.from_buffers(type, flags.size, [None, pa.py_buffer(bits)])
    arr = np.ascontiguousarray(values, dtype=_NUMPY[type])
    return pa.Array.from_buffers(type, arr.size, [None, pa.py_buffer(arr)])


def binaries(values: Sequence[bytes | None], type: pa.DataType) -> pa.Array:
    """A binary (or string, large_binary) array; None entries are null."""
    present = np.array([v is not None for v in values], dtype=bool)
    lengths = np.array([len(v) if v is not None else 0 for v in values], dtype=np.int64)
    wide = pa.types.is_large_binary(type) or pa.types.is_large_string(type)
    offsets = np.zeros(len(values) + 1, dtype=np.int64 if wide else np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(v for v in values if v is not None)
    return pa.Array.from_buffers(
        type, len(values), [_validity(present), pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def strings(values: Sequence[str]) -> pa.Array:
    return binaries([v.encode() for v in values], pa.string())


def lists(values: Sequence[Sequence[int] | np.ndarray | None], type: pa.ListType) -> pa.Array:
    """A list-of-integers array (32-bit list offsets); None entries are null lists."""
    present = np.array([v is not None for v in values], dtype=bool)
    lengths = np.array([len(v) if v is not None else 0 for v in values], dtype=np.int64)
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    parts = [
        np.asarray(v, dtype=_NUMPY[type.value_type]).reshape(-1) for v in values if v is not None and len(v)
    ]
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=_NUMPY[type.value_type])
    return pa.Array.from_buffers(
        type,
        len(values),
        [_validity(present), pa.py_buffer(offsets)],
        children=[numbers(flat, type.value_type)],
    )


def dictionary(values: Sequence[str], type: pa.DictionaryType) -> pa.Array:
    """A dictionary-encoded string array, words in order of first appearance (as ``dictionary_encode``)."""
    index: dict[str, int] = {}
    codes = [index.setdefault(v, len(index)) for v in values]
    return pa.DictionaryArray.from_arrays(numbers(codes, type.index_type), strings(list(index)))


def array_numbers(arr: pa.Array) -> np.ndarray:
    """A fixed-width array's values as numpy, read from its data buffer (``to_numpy`` imports pandas).

    Entries under nulls are whatever the buffer holds: callers read non-null arrays, or mask nulls themselves.
    """
    dtype = _NUMPY[arr.type]
    data = np.frombuffer(arr.buffers()[1], dtype=dtype) if len(arr) else np.zeros(0, dtype=dtype)
    return data[arr.offset : arr.offset + len(arr)]


def column_numbers(table: pa.Table, name: str) -> np.ndarray:
    """A fixed-width column as int64 (see :func:`array_numbers`)."""
    parts = [array_numbers(chunk) for chunk in table.column(name).chunks]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
