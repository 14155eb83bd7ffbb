"""Sparse snapshots: the elements a launch touched, with their values, instead of a view's whole span.

An interpreted launch that touches 64 elements of a 256 MiB tensor stores those 64 elements' indices and
values (before the launch, and after it when it changed them), not 256 MiB twice (see
:mod:`tilelens.core.interpreted.touched`, which decides per argument). Every element the launch read or wrote is in the
snapshot, so replaying the recorded kernel reads only known elements; the others are *unknown*: a replay
rebuilds them as zeros and says so when a kernel (an edited one) reads them.

Layout: a one-row Arrow table like :mod:`tilelens.store.files.tensors` (``dtype``, ``shape``, ``strides``,
``storage_offset``), plus ``span`` (the view's span in elements), ``index`` (the touched elements' positions in
that span: int64, strictly increasing, raw bytes) and ``data`` (their values, raw bytes, ``len(index) *
itemsize``). The schema metadata's ``format`` tells it apart from a whole tensor. Like the tensor codec, it
holds raw bytes only: nothing in it is executable.

Invariants: ``index`` is sorted and unique, within ``[0, span)``; ``data`` holds exactly one element per index.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from tilelens.errors import TensorCodecError
from tilelens.store.files import arrowbuild
from tilelens.store.files.tensors import DTYPES, dtype_name

FORMAT = "tilelens.sparse"
FORMAT_VERSION = "1"

SCHEMA = pa.schema(
    [
        pa.field("dtype", pa.string(), nullable=False),
        pa.field("shape", pa.list_(pa.int64()), nullable=False),
        pa.field("strides", pa.list_(pa.int64()), nullable=False),
        pa.field("storage_offset", pa.int64(), nullable=False),
        pa.field("span", pa.int64(), nullable=False),
        pa.field("index", pa.large_binary(), nullable=False),
        pa.field("data", pa.large_binary(), nullable=False),
    ],
    metadata={"format": FORMAT, "version": FORMAT_VERSION, "byteorder": sys.byteorder},
)


@dataclass
class SparseSnapshot:
    """Some elements of a view's span: ``values[i]`` is element ``index[i]`` of the span (1-D, host)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    storage_offset: int
    span: int
    index: np.ndarray  # int64, sorted, unique
    values: torch.Tensor  # 1-D, ``dtype``, one per index

    @property
    def elements(self) -> int:
        return int(self.index.size)

    def known(self) -> np.ndarray:
        """A bool per span element: True where the snapshot holds its value."""
        mask = np.zeros(self.span, dtype=bool)
        mask[self.index] = True
        return mask

    def dense(self, fill: torch.Tensor | None = None) -> torch.Tensor:
        """The whole span (1-D): the known values over ``fill`` (zeros when None)."""
        # numpy's memset/memcpy, not torch.zeros/clone: torch's thread pool wakes up for large CPU tensors.
        out = torch.empty(self.span, dtype=self.dtype)
        raw = out.view(torch.uint8).numpy().reshape(self.span, self.dtype.itemsize)
        if fill is None:
            raw[...] = 0
        else:
            raw[...] = fill.contiguous().view(torch.uint8).numpy().reshape(self.span, self.dtype.itemsize)
        raw[self.index] = self.values.contiguous().view(torch.uint8).numpy().reshape(-1, self.dtype.itemsize)
        return out


def for_argument(a: Any, index: np.ndarray, values: torch.Tensor) -> SparseSnapshot:
    """The sparse snapshot of a recorded tensor argument (``records.ArgumentRecord``) at ``index``."""
    shape, strides = tuple(int(n) for n in a.shape), tuple(int(n) for n in a.strides)
    span = 0 if any(n == 0 for n in shape) else 1 + sum((n - 1) * st for n, st in zip(shape, strides))
    return SparseSnapshot(values.dtype, shape, strides, int(a.storage_offset), span, index, values)


def is_sparse_table(table: pa.Table) -> bool:
    return (table.schema.metadata or {}).get(b"format") == FORMAT.encode()


def sparse_to_table(snap: SparseSnapshot) -> pa.Table:
    itemsize = snap.dtype.itemsize
    index = np.ascontiguousarray(snap.index, dtype="<i8")
    data = snap.values.detach().contiguous().reshape(-1)
    if data.device.type != "cpu":
        data = data.cpu()
    raw = data.view(torch.uint8).numpy()
    if raw.size != index.size * itemsize:
        raise TensorCodecError(f"sparse snapshot: {index.size} indices but {raw.size // itemsize} values")
    return pa.Table.from_arrays(
        [
            arrowbuild.strings([dtype_name(snap.dtype)]),
            arrowbuild.lists([list(snap.shape)], pa.list_(pa.int64())),
            arrowbuild.lists([list(snap.strides)], pa.list_(pa.int64())),
            arrowbuild.numbers([snap.storage_offset], pa.int64()),
            arrowbuild.numbers([snap.span], pa.int64()),
            arrowbuild.binaries([index.tobytes()], pa.large_binary()),
            arrowbuild.binaries([raw.tobytes()], pa.large_binary()),
        ],
        schema=SCHEMA,
    )


def table_to_sparse(table: pa.Table) -> SparseSnapshot:
    meta = table.schema.metadata or {}
    if not is_sparse_table(table):
        raise TensorCodecError("table is not a TileLens sparse snapshot")
    if meta.get(b"version") != FORMAT_VERSION.encode():
        raise TensorCodecError(f"unsupported sparse snapshot version {meta.get(b'version')!r}")
    if meta.get(b"byteorder") != sys.byteorder.encode():
        raise TensorCodecError(f"sparse snapshot stored with byte order {meta.get(b'byteorder')!r}")
    if table.num_rows != 1 or set(SCHEMA.names) - set(table.column_names):
        raise TensorCodecError("malformed sparse snapshot table")
    row = {name: table.column(name)[0].as_py() for name in SCHEMA.names}
    dtype = DTYPES.get(row["dtype"])
    if dtype is None:
        raise TensorCodecError(f"unsupported tensor dtype {row['dtype']!r}")
    span = int(row["span"])
    index = np.frombuffer(row["index"], dtype="<i8").astype(np.int64)
    data = row["data"]
    if len(data) != index.size * dtype.itemsize:
        raise TensorCodecError(f"sparse snapshot: {index.size} indices, {len(data)} bytes of {dtype} values")
    if index.size and (index[0] < 0 or index[-1] >= span or (np.diff(index) <= 0).any()):
        raise TensorCodecError("sparse snapshot: indices not sorted, unique and inside the span")
    values = (
        torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype)
        if data
        else torch.empty(0, dtype=dtype)
    )
    return SparseSnapshot(
        dtype,
        tuple(row["shape"]),
        tuple(row["strides"]),
        int(row["storage_offset"]),
        span,
        index,
        values,
    )
