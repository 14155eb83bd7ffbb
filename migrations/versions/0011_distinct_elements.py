"""Each traced argument stores how many distinct elements its lanes touched: ``launch_args.distinct_elements``.

``tilelens show`` printed the count by decoding the whole access trace (importing pyarrow, a third of the
command's time). The recorder now stores it with the launch; rows recorded before this revision keep NULL, and
``show`` computes theirs from the trace as before. Not back-filled here: that would read every trace of the
history inside a schema upgrade.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN alters the SQLite table in place (no copy of launch_args under the views that read it).
    op.add_column("launch_args", sa.Column("distinct_elements", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("launch_args", "distinct_elements")  # in place: SQLite 3.35+ drops a column without a copy
