"""Persistent history of recorded launches: SQL rows for what is queried, content-addressed blobs for bulk.

Importing this package does not import torch; tensors are encoded only when one is stored or loaded.
"""

from tilelens.store.blobs import BlobRef, BlobStore
from tilelens.store.errors import (
    BlobCorruptError,
    BlobError,
    BlobMissingError,
    HistoryError,
    NotAHistoryError,
    SchemaTooNewError,
)
from tilelens.store.history import History, HistoryStatus, inspect_history

__all__ = [
    "BlobCorruptError",
    "BlobError",
    "BlobMissingError",
    "BlobRef",
    "BlobStore",
    "History",
    "HistoryError",
    "HistoryStatus",
    "NotAHistoryError",
    "SchemaTooNewError",
    "inspect_history",
]
