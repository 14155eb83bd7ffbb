"""Runs get a stable identity, ``runs.uuid``, so a run copied from one history to another is recognised there.

Ids are allocated by each database and differ between histories; ``tilelens db copy`` matches runs by this
column instead (copying twice adds nothing). New runs get a random UUID when they begin; runs recorded before
this revision get one here, once, so they too keep it through every later copy.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # ADD COLUMN and CREATE UNIQUE INDEX alter SQLite tables in place: no copy of ``runs`` under its views.
    # The column stays nullable in the schema (NOT NULL would need that copy); TileLens always sets it.
    op.add_column("runs", sa.Column("uuid", sa.String(length=36), nullable=True))
    runs = sa.table("runs", sa.column("id", sa.Integer()), sa.column("uuid", sa.String(36)))
    bind = op.get_bind()
    ids = [row[0] for row in bind.execute(sa.select(runs.c.id).where(runs.c.uuid.is_(None)))]
    if ids:
        bind.execute(
            runs.update().where(runs.c.id == sa.bindparam("run_id")).values(uuid=sa.bindparam("new_uuid")),
            [{"run_id": run_id, "new_uuid": str(uuid.uuid4())} for run_id in ids],
        )
    op.create_index(op.f("ix_runs_uuid"), "runs", ["uuid"], unique=True)


def downgrade() -> None:
    op.drop_index(op.f("ix_runs_uuid"), table_name="runs")
    op.drop_column("runs", "uuid")  # in place: SQLite 3.35+ drops a column without copying the table
