"""Initial schema: runs, kernels, launches, launch arguments, autotune events, blobs, replays.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_blobs")),
    )
    op.create_index(op.f("ix_blobs_kind"), "blobs", ["kind"])

    op.create_table(
        "kernels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("module", sa.Text(), nullable=False),
        sa.Column("qualname", sa.Text(), nullable=False),
        sa.Column("file", sa.Text(), nullable=False),
        sa.Column("def_line", sa.Integer(), nullable=False),
        sa.Column("source_sha256", sa.String(length=64), nullable=False),
        sa.Column("cache_key", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kernels")),
        sa.UniqueConstraint(
            "module", "qualname", "source_sha256", name=op.f("uq_kernels_module_qualname_source_sha256")
        ),
    )
    op.create_index(op.f("ix_kernels_qualname"), "kernels", ["qualname"])

    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("argv", sa.JSON(), nullable=False),
        sa.Column("cwd", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("tag", sa.Text(), nullable=True),
        sa.Column("versions", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_index(op.f("ix_runs_started_at"), "runs", ["started_at"])
    op.create_index(op.f("ix_runs_status"), "runs", ["status"])
    op.create_index(op.f("ix_runs_tag"), "runs", ["tag"])

    op.create_table(
        "launches",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kernel_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("device", sa.String(length=64), nullable=False),
        sa.Column("grid_x", sa.Integer(), nullable=False),
        sa.Column("grid_y", sa.Integer(), nullable=False),
        sa.Column("grid_z", sa.Integer(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("tuning_key", sa.Text(), nullable=True),
        sa.Column("cache_key", sa.Text(), nullable=True),
        sa.Column("loads", sa.BigInteger(), nullable=False),
        sa.Column("stores", sa.BigInteger(), nullable=False),
        sa.Column("atomics", sa.BigInteger(), nullable=False),
        sa.Column("load_lanes", sa.BigInteger(), nullable=False),
        sa.Column("store_lanes", sa.BigInteger(), nullable=False),
        sa.Column("atomic_lanes", sa.BigInteger(), nullable=False),
        sa.Column("bytes_loaded", sa.BigInteger(), nullable=False),
        sa.Column("bytes_stored", sa.BigInteger(), nullable=False),
        sa.Column("oob_lanes", sa.BigInteger(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.Column("lanes", sa.BigInteger(), nullable=False),
        sa.Column("unattributed", sa.JSON(), nullable=True),
        sa.Column("trace_blob", sa.String(length=64), nullable=True),
        sa.Column("trace_rows", sa.BigInteger(), nullable=True),
        sa.Column("trace_bytes", sa.BigInteger(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["kernel_id"], ["kernels.id"], name=op.f("fk_launches_kernel_id_kernels")),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_launches_run_id_runs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["trace_blob"], ["blobs.sha256"], name=op.f("fk_launches_trace_blob_blobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_launches")),
    )
    op.create_index(op.f("ix_launches_created_at"), "launches", ["created_at"])
    op.create_index(op.f("ix_launches_kernel_id"), "launches", ["kernel_id"])
    op.create_index(op.f("ix_launches_oob_lanes"), "launches", ["oob_lanes"])
    op.create_index(op.f("ix_launches_role"), "launches", ["role"])
    op.create_index("ix_launches_run_id_seq", "launches", ["run_id", "seq"])
    op.create_index(op.f("ix_launches_started_at"), "launches", ["started_at"])
    op.create_index(op.f("ix_launches_status"), "launches", ["status"])

    op.create_table(
        "autotune_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kernel_id", sa.Integer(), nullable=False),
        sa.Column("launch_id", sa.Integer(), nullable=True),
        sa.Column("tuning_key", sa.Text(), nullable=False),
        sa.Column("configs", sa.JSON(), nullable=False),
        sa.Column("timings", sa.JSON(), nullable=True),
        sa.Column("chosen", sa.JSON(), nullable=False),
        sa.Column("cache_hit", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["kernel_id"], ["kernels.id"], name=op.f("fk_autotune_events_kernel_id_kernels")
        ),
        sa.ForeignKeyConstraint(
            ["launch_id"],
            ["launches.id"],
            name=op.f("fk_autotune_events_launch_id_launches"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_autotune_events_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_autotune_events")),
    )
    op.create_index(op.f("ix_autotune_events_created_at"), "autotune_events", ["created_at"])
    op.create_index(op.f("ix_autotune_events_kernel_id"), "autotune_events", ["kernel_id"])
    op.create_index(op.f("ix_autotune_events_launch_id"), "autotune_events", ["launch_id"])
    op.create_index(op.f("ix_autotune_events_run_id"), "autotune_events", ["run_id"])

    op.create_table(
        "launch_args",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("launch_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("dtype", sa.String(length=64), nullable=True),
        sa.Column("shape", sa.JSON(), nullable=True),
        sa.Column("strides", sa.JSON(), nullable=True),
        sa.Column("storage_offset", sa.BigInteger(), nullable=True),
        sa.Column("storage_group", sa.Integer(), nullable=True),
        sa.Column("device", sa.String(length=64), nullable=True),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("access", sa.JSON(), nullable=True),
        sa.Column("before_blob", sa.String(length=64), nullable=True),
        sa.Column("after_blob", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["after_blob"], ["blobs.sha256"], name=op.f("fk_launch_args_after_blob_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["before_blob"], ["blobs.sha256"], name=op.f("fk_launch_args_before_blob_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["launch_id"], ["launches.id"], name=op.f("fk_launch_args_launch_id_launches"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_launch_args")),
        sa.UniqueConstraint("launch_id", "position", name=op.f("uq_launch_args_launch_id_position")),
    )
    op.create_table(
        "replays",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("launch_id", sa.Integer(), nullable=False),
        sa.Column("device", sa.String(length=64), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("max_abs_err", sa.Float(), nullable=True),
        sa.Column("max_rel_err", sa.Float(), nullable=True),
        sa.Column("trace_equal", sa.Boolean(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.Column("versions", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["launch_id"], ["launches.id"], name=op.f("fk_replays_launch_id_launches"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replays")),
    )
    op.create_index(op.f("ix_replays_created_at"), "replays", ["created_at"])
    op.create_index(op.f("ix_replays_launch_id"), "replays", ["launch_id"])
    op.create_index(op.f("ix_replays_outcome"), "replays", ["outcome"])


def downgrade() -> None:
    # Dropping a table drops its indexes; children before parents for the foreign keys.
    for name in ("replays", "launch_args", "autotune_events", "launches", "runs", "kernels", "blobs"):
        op.drop_table(name)
