"""The sha256 of a launched kernel's whole file, which replay compares before it runs anything of that file.

Stored per launch, not per kernel: a kernel row is shared by every recording of the same kernel source, while
the rest of its file (helpers, constants, imports) may differ between them. Null for launches recorded before
this revision; replay then checks the kernel's own source only.

Revision ID: 0005
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A nullable column without a default: a plain ALTER TABLE ADD COLUMN on SQLite, no table rebuild, so the
    # views of revision 0002 are untouched.
    op.add_column("launches", sa.Column("kernel_file_sha256", sa.String(length=64), nullable=True))


def downgrade() -> None:
    # ALTER TABLE DROP COLUMN (SQLite 3.35+, PostgreSQL): a batch rebuild of launches would break the views.
    op.drop_column("launches", "kernel_file_sha256")
