"""The first out-of-bounds events of a launch on its row: ``launches.oob_sample`` (JSON).

``tilelens show`` of a launch with out-of-bounds lanes read the whole access trace to list its first events
(importing pyarrow, numpy and pandas: ~0.3 s of a ~0.5 s command). The recorder now stores the first ten with
their total (``tilelens.store.files.oobsample``); rows recorded before this revision keep NULL and ``show`` reads
their trace as before. Not back-filled: that would read every trace inside a schema upgrade.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN alters the SQLite table in place; the views name their columns, so they stay as they are.
    op.add_column("launches", sa.Column("oob_sample", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("launches", "oob_sample")
