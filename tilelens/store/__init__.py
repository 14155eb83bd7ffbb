"""Persistent history of recorded launches: SQL rows for what is queried, content-addressed blobs for bulk.

Importing this package does not import torch; tensors are encoded only when one is stored or loaded.
"""

from typing import Any

_EXPORTS = {
    "BlobRef": "tilelens.store.files.blobs",
    "BlobStore": "tilelens.store.files.blobs",
    "BlobCorruptError": "tilelens.errors",
    "BlobError": "tilelens.errors",
    "BlobMissingError": "tilelens.errors",
    "HistoryError": "tilelens.errors",
    "LaunchNotFoundError": "tilelens.errors",
    "NoHistoryError": "tilelens.errors",
    "NotAHistoryError": "tilelens.errors",
    "SchemaTooNewError": "tilelens.errors",
    "History": "tilelens.store.write.history",
    "HistoryStatus": "tilelens.store.write.history",
    "inspect_history": "tilelens.store.write.history",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tilelens.store' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
