"""Errors the store raises on purpose.

Each carries a message meant to be shown as-is on one line: the CLI prints ``str(exc)`` for any
:class:`HistoryError` and exits with status 2, so the message must name the thing that is wrong.
"""

from __future__ import annotations

from pathlib import Path


class HistoryError(Exception):
    """A history cannot be opened, read or written as asked."""


class NotAHistoryError(HistoryError):
    """The location exists but is not a TileLens history (not a database, or another program's database)."""


class SchemaTooNewError(HistoryError):
    """The history was written by a newer TileLens; this code must not touch it."""

    def __init__(self, location: str, revisions: list[str], head: str) -> None:
        self.location = location
        self.revisions = revisions
        self.head = head
        super().__init__(
            f"history {location} has schema revision {', '.join(revisions)}, newer than this TileLens "
            f"understands (its newest is {head}); upgrade TileLens to use it"
        )


class BlobError(HistoryError):
    def __init__(self, sha256: str, path: Path, message: str) -> None:
        self.sha256 = sha256
        self.path = path
        super().__init__(message)


class BlobMissingError(BlobError):
    def __init__(self, sha256: str, path: Path) -> None:
        super().__init__(sha256, path, f"blob {sha256} is missing (expected at {path})")


class BlobCorruptError(BlobError):
    def __init__(self, sha256: str, path: Path, actual: str) -> None:
        self.actual = actual
        super().__init__(sha256, path, f"blob {sha256} is corrupt: its content hashes to {actual} ({path})")
