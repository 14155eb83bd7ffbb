"""Kernel bundles: ``launches.bundle_blob``.

A launch keeps what reproduces its kernel without the kernel's file (``tilelens.core.kernel.bundle``: the
sources of the kernel and of the jit functions it calls, and the module-level values they read), as a blob, so
``tilelens repro`` and ``replay --from-history`` work when the file is gone or changed. NULL for launches
recorded before this revision.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # SQLite adds a column with a REFERENCES clause (NULL default) in place, which Alembic does not emit there;
    # PostgreSQL adds the column, then its foreign key. The views name their columns, so they stay as they are.
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE launches ADD COLUMN bundle_blob VARCHAR(64) REFERENCES blobs (sha256)")
        return
    op.add_column("launches", sa.Column("bundle_blob", sa.String(length=64), nullable=True))
    op.create_foreign_key("fk_launches_bundle_blob_blobs", "launches", "blobs", ["bundle_blob"], ["sha256"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE launches DROP COLUMN bundle_blob")  # SQLite >= 3.35
        return
    op.drop_constraint("fk_launches_bundle_blob_blobs", "launches", type_="foreignkey")
    op.drop_column("launches", "bundle_blob")
