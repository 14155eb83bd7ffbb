"""Executed lines: ``launches.executed_lines``.

A launch recorded with coverage on (``tilelens record --coverage``, ``pytest --tilelens-coverage``) keeps the
source lines of its kernel function that ran, as a JSON array of absolute line numbers of the kernel's file
(the same numbering as the access trace's ``line``), for ``tilelens coverage``. NULL: not captured (coverage
off, a compiled launch, a Gluon launch, or capture unavailable: ``config.line_capture`` says why).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A nullable column without a default: SQLite and PostgreSQL add it in place. The views name their
    # columns, so they stay as they are.
    op.add_column("launches", sa.Column("executed_lines", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE launches DROP COLUMN executed_lines")  # SQLite >= 3.35
        return
    op.drop_column("launches", "executed_lines")
