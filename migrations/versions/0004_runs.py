"""Runs know their process, and a launch's ``seq`` is unique in its run.

* ``runs.pid_start``, ``runs.boot_id``, ``runs.pid_ns``: with ``host`` and ``pid`` they name the recording
  process exactly (``/proc/<pid>/stat`` start time, the kernel's boot id, the pid namespace), so a later
  TileLens on the same machine can tell a run whose process died without finishing it (SIGKILL,
  ``os._exit``, a power cut) from one still recording, even after the pid was reused. Older runs have NULLs.
* ``launches (run_id, seq)`` becomes a unique index (it replaces the plain index of 0001): no writer can
  record two launches with one ``seq`` in a run. A unique index, not a table constraint: on SQLite both are
  the same unique b-tree, and the index needs no copy of the largest table. Runs that already hold
  duplicates (forked children sharing their parent's counter) are renumbered first, in the order
  ``(seq, id)`` from the run's smallest ``seq``; no other row changes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _renumber_duplicate_seqs() -> None:
    conn = op.get_bind()
    runs = [
        r[0]
        for r in conn.execute(
            sa.text("SELECT DISTINCT run_id FROM launches GROUP BY run_id, seq HAVING COUNT(*) > 1")
        )
    ]
    for run_id in runs:
        rows = conn.execute(
            sa.text("SELECT id, seq FROM launches WHERE run_id = :run ORDER BY seq, id"), {"run": run_id}
        ).fetchall()
        first = rows[0][1]
        changes = [{"id": r[0], "seq": first + i} for i, r in enumerate(rows) if r[1] != first + i]
        if changes:
            conn.execute(sa.text("UPDATE launches SET seq = :seq WHERE id = :id"), changes)


def upgrade() -> None:
    op.add_column("runs", sa.Column("pid_start", sa.BigInteger(), nullable=True))
    op.add_column("runs", sa.Column("boot_id", sa.String(length=64), nullable=True))
    op.add_column("runs", sa.Column("pid_ns", sa.String(length=64), nullable=True))
    _renumber_duplicate_seqs()
    op.drop_index("ix_launches_run_id_seq", table_name="launches")
    op.create_index("uq_launches_run_id_seq", "launches", ["run_id", "seq"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_launches_run_id_seq", table_name="launches")
    op.create_index("ix_launches_run_id_seq", "launches", ["run_id", "seq"])
    # Plain ALTER TABLE DROP COLUMN (SQLite 3.35+): a batch copy of ``runs`` would trip over the views.
    for name in ("pid_ns", "boot_id", "pid_start"):
        op.drop_column("runs", name)
