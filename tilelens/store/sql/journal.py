"""A writer killed in the middle of a SQLite transaction leaves a hot rollback journal beside the history.

Only a read-write connection may roll it back; a read-only one fails with "attempt to write a readonly
database". Writers roll it back before anything else (:func:`recover_hot_journal`); readers, which never
write, say what is wrong and what fixes it (:func:`hot_journal_error`). Standard library only: the read path
imports no SQLAlchemy.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tilelens.errors import HistoryError

BUSY_TIMEOUT_S = 30.0


def has_hot_journal(path: Path) -> bool:
    """Whether a rollback journal with content lies beside ``path`` (what a writer killed mid-transaction
    leaves: only a read-write connection may roll it back)."""
    try:
        return Path(f"{path}-journal").stat().st_size > 0
    except OSError:
        return False


def hot_journal_error(path: Path, label: str) -> HistoryError:
    return HistoryError(
        f"cannot read history {label}: a writer was killed in the middle of a transaction and left "
        f"{path.name}-journal behind, which only a writer may roll back; run `tilelens db upgrade` once "
        "(it rolls the unfinished transaction back and changes nothing else)"
    )


def recover_hot_journal(path: Path, label: str) -> None:
    """Roll back what a writer killed mid-transaction left in ``<history>-journal`` (a hot journal).

    Only a read-write connection may roll a hot journal back; a read-only one fails with "attempt to write a
    readonly database", and every later open that looks before writing (as :meth:`History.open` does, so as
    to refuse a newer or foreign database before touching it) would fail the same way, forever. A writer
    opening the history therefore first opens it read-write and reads its schema, which is what makes SQLite
    roll the journal back, restoring the file as it was before the killed transaction.
    """
    journal = Path(f"{path}-journal")
    try:
        if journal.stat().st_size == 0:
            return
    except FileNotFoundError:
        return
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise HistoryError(
            f"cannot open history {label}: a writer was killed in the middle of a transaction and left "
            f"{journal.name} behind, which could not be rolled back ({exc})"
        ) from exc
