"""Compiled recording: scalar types, the GPU's name and a trace derived after the fact.

* ``launch_args.value_type``: the Python type of a scalar or constexpr argument (``int``, ``float``,
  ``bool``), with the Triton type its parameter annotation fixed after a colon (``float:fp32``). SQLite
  stores the JSON text ``1.0`` in a column of NUMERIC affinity as the integer 1, so the value column alone
  cannot tell a float 1.0 from an int 1, and compiled Triton specializes an int equal to 1 as a constant.
* ``launches.gpu_name``: the device's name for launches recorded on a GPU (``torch.cuda.get_device_name``).
* ``launches.trace_derived``: true when the launch's access trace was derived later (``tilelens trace``) by
  interpreting its before-snapshot, rather than recorded while it ran.

All three are nullable: older rows keep NULL (unknown). ADD COLUMN alters SQLite tables in place, so the views
of 0010 stay as they are.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("launch_args", sa.Column("value_type", sa.String(length=64), nullable=True))
    op.add_column("launches", sa.Column("gpu_name", sa.Text(), nullable=True))
    op.add_column("launches", sa.Column("trace_derived", sa.Boolean(), nullable=True))


def downgrade() -> None:
    op.drop_column("launches", "trace_derived")
    op.drop_column("launches", "gpu_name")
    op.drop_column("launch_args", "value_type")
