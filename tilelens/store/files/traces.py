"""The access-trace format: its Parquet schema, how events are encoded into it, and how a row is decoded.

The store owns this format (a trace is a blob of the history); capture (``tilelens.core.engine.access``) hands over
plain per-event columns and gets a table back, and the read paths decode rows here or, vectorised over whole
columns, in :mod:`tilelens.store.files.lanes`. Nothing here knows about Triton.

One row per memory event. An access whose offsets are affine in the block indices (nearly all of them) is
stored as ``base`` + ``strides``; only irregular ones (gathers) keep ``offsets`` for every lane; masks are packed
bits (``numpy.packbits`` order, C order of the block), null when every lane is set (``mask``) or none is
(``oob_mask``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tilelens.store.files import arrowbuild

TRACE_SCHEMA = pa.schema(
    [
        pa.field("pid_x", pa.int32()),
        pa.field("pid_y", pa.int32()),
        pa.field("pid_z", pa.int32()),
        pa.field("event", pa.int32()),  # index of the event within its program
        pa.field("op", pa.dictionary(pa.int8(), pa.string())),  # load, store, atomic_cas, atomic_<rmw op>
        pa.field("arg", pa.int16()),  # kernel parameter position, -1 when no argument is near
        pa.field("line", pa.int32()),  # kernel source line of the access
        pa.field("elem_bytes", pa.int8()),
        pa.field("shape", pa.list_(pa.int32())),  # block shape of the access
        pa.field("base", pa.int64()),  # element offset of lane 0, relative to the argument
        pa.field("strides", pa.list_(pa.int64())),  # element strides per block axis; null when not affine
        pa.field("offsets", pa.list_(pa.int64())),  # every lane's element offset; null when affine
        pa.field(
            "mask", pa.binary()
        ),  # packed bits (numpy.packbits order) of active lanes; null = all active
        # packed bits of active lanes outside the view of the row's argument; null = none
        pa.field("oob_mask", pa.binary()),
        pa.field("lanes", pa.int32()),
        pa.field("active", pa.int32()),
        pa.field("oob", pa.int32()),
        # Active lanes outside every argument's storage (a subset of oob): stores and atomics never wrote
        # them, loads never dereferenced them (see tilelens.core.engine.bounds). Packed bits; null = none.
        pa.field("stray_mask", pa.binary()),
        pa.field("stray", pa.int32()),
        # What the out-of-bounds lanes of a load or atomic read: their raw bytes (elem_bytes each) in lane
        # order (the order of oob_mask's set bits); null for stores and events without such lanes.
        pa.field("oob_values", pa.binary()),
    ]
)

# Parquet options for trace blobs: statistics over every column cost a third of the write and are never
# read; only ``op`` repeats enough for a dictionary; irregular offsets (gathers) are small deltas of each
# other far more often than they are small numbers, so they go delta-packed. The Arrow schema copy in the
# footer (1.5 KB, most of a small launch's trace) is left out: Parquet's own types give the same columns
# back, with ``op`` as plain strings instead of dictionary-encoded ones.
TRACE_WRITE_OPTIONS: dict[str, Any] = {
    "write_statistics": False,
    "store_schema": False,
    "use_dictionary": ["op"],
    "column_encoding": {"offsets.list.element": "DELTA_BINARY_PACKED"},
}


def encode_trace(columns: Mapping[str, Sequence[Any]]) -> pa.Table:
    """A :data:`TRACE_SCHEMA` table from one list per column, one entry per event, in event order.

    ``offsets`` entries are None (an affine event, described by ``base`` and ``strides``) or a 1-D int64
    array of every lane's element offset; they become one list column built from a flat buffer, without
    Python lists. ``op`` entries are strings. Every other column takes the values its field's type takes.
    Arrays are built from buffers (:mod:`tilelens.store.files.arrowbuild`): ``pyarrow.array`` would import pandas.
    """
    arrays = []
    for field in TRACE_SCHEMA:
        values = columns[field.name]
        if field.name == "op":
            arrays.append(arrowbuild.dictionary(values, field.type))
        elif pa.types.is_list(field.type):
            arrays.append(arrowbuild.lists(values, field.type))
        elif pa.types.is_binary(field.type):
            arrays.append(arrowbuild.binaries(values, field.type))
        else:
            arrays.append(arrowbuild.numbers(values, field.type))
    return pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA)


# The last few encodings with their columns: launches of one kernel on same-shaped inputs usually hand over
# the same columns, event for event, and comparing them costs a fraction of encoding them again.
_ENCODED: list[tuple[dict[str, list[Any]], pa.Table]] = []
ENCODED_KEPT = 4
ENCODED_MAX_EVENTS = 4096  # larger traces are encoded every time (comparing costs what they weigh)


def encode_trace_reusing(columns: Mapping[str, Sequence[Any]]) -> pa.Table:
    """``encode_trace(columns)``, or the table of a recent call whose columns were equal, value for value.

    Invariant: the table returned is the one ``encode_trace`` gives for these columns (equal values of each
    column encode to equal arrays; Arrow tables are immutable, so sharing one is safe).
    """
    events = len(columns["event"])
    if events <= ENCODED_MAX_EVENTS:
        for known, table in reversed(_ENCODED):
            if _same_columns(known, columns):
                return table
    table = encode_trace(columns)
    if events <= ENCODED_MAX_EVENTS:
        kept = {name: list(columns[name]) for name in TRACE_SCHEMA.names}
        _ENCODED[:] = [*_ENCODED[-(ENCODED_KEPT - 1) :], (kept, table)]
    return table


def _same_columns(known: Mapping[str, Sequence[Any]], columns: Mapping[str, Sequence[Any]]) -> bool:
    for name in TRACE_SCHEMA.names:
        a, b = known[name], columns[name]
        if len(a) != len(b):
            return False
        if name == "offsets":  # None or a 1-D int64 array per event
            for x, y in zip(a, b):
                if x is None or y is None:
                    if x is not y:
                        return False
                elif x.shape != y.shape or not np.array_equal(x, y):
                    return False
        else:
            try:
                if a != b:
                    return False
            except ValueError:  # an array among the values: not the plain case, encode it
                return False
    return True


def lane_offsets(row: dict[str, Any]) -> np.ndarray:
    """Every lane's element offset of one trace row (a dict as from ``Table.to_pylist()``), in block shape."""
    shape = tuple(row["shape"])
    if row["offsets"] is not None:
        return np.asarray(row["offsets"], dtype=np.int64).reshape(shape)
    out = np.full(shape, row["base"], dtype=np.int64)
    for axis, stride in enumerate(row["strides"]):
        index_shape = [1] * len(shape)
        index_shape[axis] = shape[axis]
        out = out + np.arange(shape[axis], dtype=np.int64).reshape(index_shape) * stride
    return out


def _unpack(bits: bytes | None, shape: tuple[int, ...]) -> np.ndarray | None:
    if bits is None:
        return None
    n = int(np.prod(shape)) if shape else 1
    return np.unpackbits(np.frombuffer(bits, dtype=np.uint8), count=n).astype(bool).reshape(shape)


def lane_mask(row: dict[str, Any]) -> np.ndarray:
    """Which lanes of one trace row were active."""
    shape = tuple(row["shape"])
    mask = _unpack(row["mask"], shape)
    return np.ones(shape, dtype=bool) if mask is None else mask


def lane_oob(row: dict[str, Any]) -> np.ndarray:
    """Which active lanes of one trace row fell outside its argument's view."""
    shape = tuple(row["shape"])
    oob = _unpack(row["oob_mask"], shape)
    return np.zeros(shape, dtype=bool) if oob is None else oob
