"""Sparse snapshots: ``launch_args.snapshot_elements``.

An interpreted launch that touches a few elements of a large tensor now stores those elements' indices and
values instead of the whole span (``tilelens.store.files.sparse``; the blob itself says which it is). The column
says so on the row, with how many elements the snapshot holds, so ``show`` and SQL need not read the blob.
NULL for a whole-span snapshot (every row recorded before this revision) or none.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN alters the SQLite table in place; the views name their columns, so they stay as they are.
    op.add_column("launch_args", sa.Column("snapshot_elements", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("launch_args", "snapshot_elements")
