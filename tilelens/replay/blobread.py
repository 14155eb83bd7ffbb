"""Reading verified blobs without ``pyarrow.parquet.read_table``.

``read_table`` goes through ``pyarrow.dataset``, whose first import pulls in pandas when it is installed: 0.6 s on
the GPU host, more than most launches take to replay. ``ParquetFile.read`` decodes the same table without it.
The bytes still come from ``BlobStore.get_bytes``, so a missing or corrupt blob raises the store's own error.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import torch

from tilelens.store import BlobStore
from tilelens.store.tensors import table_to_tensor


def read_table(blobs: BlobStore, sha256: str) -> pa.Table:
    return pq.ParquetFile(pa.BufferReader(blobs.get_bytes(sha256))).read()


def read_tensor(blobs: BlobStore, sha256: str) -> torch.Tensor:
    return table_to_tensor(read_table(blobs, sha256))
