"""Lossless torch.Tensor <-> Arrow codec.

A recorded argument must come back exactly as the kernel saw it: same dtype, shape, strides and storage
offset, and every element bit for bit (NaN payloads and negative zeros included), because replay feeds it to
the same kernel again and compares the results. So the codec stores raw bytes plus the view geometry, never
values converted through numpy (which has no bfloat16 or float8), and never a Python object serialisation
(loading one can execute code). Only the span of storage the view can reach is stored: a slice of a huge buffer costs what the
slice covers, not the buffer.

Layout: a one-row Arrow table with columns ``dtype`` (torch name, e.g. ``"bfloat16"``), ``shape``,
``strides``, ``storage_offset`` (elements) and ``data`` (the reachable span as a list of byte chunks, so no
single Arrow value approaches the 2 GiB limit). The schema metadata carries a format version and the byte
order.
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa
import torch

from tilelens.errors import TensorCodecError
from tilelens.store.files import arrowbuild

FORMAT = "tilelens.tensor"
FORMAT_VERSION = "1"
CHUNK_BYTES = 64 * 1024 * 1024

SCHEMA = pa.schema(
    [
        pa.field("dtype", pa.string(), nullable=False),
        pa.field("shape", pa.list_(pa.int64()), nullable=False),
        pa.field("strides", pa.list_(pa.int64()), nullable=False),
        pa.field("storage_offset", pa.int64(), nullable=False),
        pa.field("data", pa.list_(pa.large_binary()), nullable=False),
    ],
    metadata={"format": FORMAT, "version": FORMAT_VERSION, "byteorder": sys.byteorder},
)

_DTYPE_NAMES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex32",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
]
# Decoding looks names up in this table only: a stored string never reaches getattr on an arbitrary name.
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name) for name in _DTYPE_NAMES if isinstance(getattr(torch, name, None), torch.dtype)
}
_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return _NAMES[dtype]
    except KeyError:
        raise TensorCodecError(f"unsupported tensor dtype {dtype}") from None


def _span(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Elements from the first to the last one the view can reach (0 for an empty view)."""
    if any(n == 0 for n in shape):
        return 0
    if any(s < 0 for s in strides):
        raise TensorCodecError(f"negative strides {strides} are not supported")
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))


def _as_bytes_view(t: torch.Tensor) -> torch.Tensor:
    """A 1-D uint8 CPU tensor over the storage span the view reaches, copied off the device if needed."""
    span = _span(tuple(t.shape), tuple(t.stride()))
    flat = t.as_strided((span,), (1,), t.storage_offset())
    if flat.device.type != "cpu":
        flat = flat.to("cpu")
    return flat.contiguous().view(torch.uint8) if span else torch.empty(0, dtype=torch.uint8)


def tensor_to_table(t: torch.Tensor) -> pa.Table:
    if not isinstance(t, torch.Tensor):
        raise TensorCodecError(f"expected a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided or t.is_quantized or t.is_meta:
        raise TensorCodecError(f"only dense strided tensors can be stored, got layout {t.layout}")
    t = t.detach()
    if t.is_conj() or t.is_neg():
        # The lazy conjugate/negative bit is not in the storage bytes; materialise it so values round-trip.
        t = t.resolve_conj().resolve_neg()
    name = dtype_name(t.dtype)
    raw = _as_bytes_view(t).numpy()
    # Build the chunks over the tensor's own bytes (no copy): offsets cut one buffer into <= CHUNK_BYTES pieces.
    cuts = [*range(0, raw.nbytes, CHUNK_BYTES), raw.nbytes] if raw.nbytes else [0]
    offsets = pa.py_buffer(np.asarray(cuts, dtype=np.int64))
    chunks = pa.Array.from_buffers(pa.large_binary(), len(cuts) - 1, [None, offsets, pa.py_buffer(raw)])
    list_offsets = pa.py_buffer(np.array([0, len(chunks)], dtype=np.int32))
    data = pa.Array.from_buffers(SCHEMA.field("data").type, 1, [None, list_offsets], children=[chunks])
    # Built from buffers (tilelens.store.files.arrowbuild): pyarrow.array would import pandas.
    return pa.Table.from_arrays(
        [
            arrowbuild.strings([name]),
            arrowbuild.lists([list(t.shape)], pa.list_(pa.int64())),
            arrowbuild.lists([list(t.stride())], pa.list_(pa.int64())),
            arrowbuild.numbers([t.storage_offset()], pa.int64()),
            data,
        ],
        schema=SCHEMA,
    )


def table_to_tensor(table: pa.Table) -> torch.Tensor:
    meta = table.schema.metadata or {}
    if meta.get(b"format") != FORMAT.encode():
        if meta.get(b"format") == b"tilelens.sparse":
            raise TensorCodecError(
                "blob holds a sparse snapshot (only the elements its launch touched), not a whole tensor"
            )
        raise TensorCodecError("table is not a TileLens tensor")
    if meta.get(b"version") != FORMAT_VERSION.encode():
        raise TensorCodecError(f"unsupported tensor format version {meta.get(b'version')!r}")
    if meta.get(b"byteorder") != sys.byteorder.encode():
        raise TensorCodecError(
            f"tensor stored with byte order {meta.get(b'byteorder')!r}, host is {sys.byteorder}"
        )
    if table.num_rows != 1 or set(SCHEMA.names) - set(table.column_names):
        raise TensorCodecError("malformed tensor table")
    row = {name: table.column(name)[0].as_py() for name in ("dtype", "shape", "strides", "storage_offset")}
    dtype = DTYPES.get(row["dtype"])
    if dtype is None:
        raise TensorCodecError(f"unsupported tensor dtype {row['dtype']!r}")
    shape, strides, offset = tuple(row["shape"]), tuple(row["strides"]), int(row["storage_offset"])
    if len(shape) != len(strides) or offset < 0 or any(n < 0 for n in shape):
        raise TensorCodecError(
            f"inconsistent tensor geometry shape={shape} strides={strides} offset={offset}"
        )

    span = _span(shape, strides)
    itemsize = dtype.itemsize
    data = table.column("data")[0].values
    buffers = [data[i].as_buffer() for i in range(len(data))] if data is not None else []
    nbytes = sum(b.size for b in buffers)
    if nbytes != span * itemsize:
        raise TensorCodecError(f"tensor data has {nbytes} bytes, view needs {span * itemsize}")

    # Allocate the offset too: storage_offset is part of the view and counts from the storage's start.
    # Filled through numpy (memset, memcpy), not torch.zeros: torch fills large CPU tensors with its thread
    # pool, whose wake-up costs milliseconds on a busy machine, more than decoding the blob.
    raw = torch.empty((offset + span) * itemsize, dtype=torch.uint8)
    dst = raw.numpy()
    pos = offset * itemsize
    dst[:pos] = 0  # the bytes before the view's first element: not recorded, zeros as always
    for buf in buffers:
        dst[pos : pos + buf.size] = np.frombuffer(buf, dtype=np.uint8)
        pos += buf.size
    return raw.view(dtype).as_strided(shape, strides, offset)
