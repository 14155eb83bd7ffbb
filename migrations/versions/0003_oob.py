"""Out-of-bounds loads and stores apart: per-launch split counts, dropped store lanes, storage sizes.

``launches`` gains ``oob_load_lanes`` and ``oob_store_lanes`` (stores and atomics), which add up to
``oob_lanes``, and ``dropped_lanes``: store and atomic lanes outside every argument's storage, which the
recorder kept from being written. All three are NULL for launches recorded before this revision (their
out-of-bounds lanes were not split). ``launch_args`` gains ``storage_bytes``, the size of the allocation behind
each tensor view, so a replay rebuilds storages of the recorded size and classifies stray lanes as the record
did. ``launch_overview`` and ``oob_launches`` are re-created with the three new columns; every column they had
keeps its name and meaning.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OVERVIEW_HEAD = """
SELECT
    l.id AS launch_id,
    l.run_id AS run_id,
    l.seq AS seq,
    l.started_at AS started_at,
    k.module || '.' || k.qualname AS kernel,
    l.kernel_id AS kernel_id,
    k.source_sha256 AS source_sha256,
    '(' || CAST(l.grid_x AS TEXT) || ', ' || CAST(l.grid_y AS TEXT) || ', ' || CAST(l.grid_z AS TEXT) || ')'
        AS grid,
    l.grid_x AS grid_x,
    l.grid_y AS grid_y,
    l.grid_z AS grid_z,
    l.status AS status,
    l.error AS error,
    l.role AS role,
    l.backend AS backend,
    l.device AS device,
    l.config AS config,
    l.tuning_key AS tuning_key,
    l.loads AS loads,
    l.stores AS stores,
    l.atomics AS atomics,
    l.lanes AS lanes,
    l.load_lanes + l.store_lanes + l.atomic_lanes AS active_lanes,
    l.bytes_loaded AS bytes_loaded,
    l.bytes_stored AS bytes_stored,
    l.oob_lanes AS oob_lanes,
    l.duration_s AS duration_s,
    l.trace_blob AS trace_blob,
    r.tag AS tag"""

_OVERVIEW_FROM = """
FROM launches l
JOIN kernels k ON k.id = l.kernel_id
JOIN runs r ON r.id = l.run_id
"""

# As in 0002, then the split counts at the end (appending keeps SELECT * consumers' column order).
LAUNCH_OVERVIEW = (
    _OVERVIEW_HEAD
    + """,
    l.oob_load_lanes AS oob_load_lanes,
    l.oob_store_lanes AS oob_store_lanes,
    l.dropped_lanes AS dropped_lanes"""
    + _OVERVIEW_FROM
)
LAUNCH_OVERVIEW_0002 = _OVERVIEW_HEAD + _OVERVIEW_FROM

OOB_LAUNCHES = "SELECT * FROM launch_overview WHERE oob_lanes > 0"

# 0002's, unchanged: re-created after a downgrade, which rebuilds ``launches`` with no view reading it.
RUN_OVERVIEW_0002 = """
SELECT
    r.id AS run_id,
    r.started_at AS started_at,
    r.finished_at AS finished_at,
    r.status AS status,
    r.exit_code AS exit_code,
    r.tag AS tag,
    COUNT(l.id) AS launches,
    COUNT(DISTINCT l.kernel_id) AS kernels,
    COALESCE(SUM(CASE WHEN l.status = 'error' THEN 1 ELSE 0 END), 0) AS errors,
    COALESCE(SUM(l.oob_lanes), 0) AS oob_lanes
FROM runs r
LEFT JOIN launches l ON l.run_id = r.id
GROUP BY r.id, r.started_at, r.finished_at, r.status, r.exit_code, r.tag
"""

_LAUNCH_COLUMNS = ("oob_load_lanes", "oob_store_lanes", "dropped_lanes")


def _drop_views() -> None:
    op.execute("DROP VIEW oob_launches")
    op.execute("DROP VIEW launch_overview")


def upgrade() -> None:
    _drop_views()
    for name in _LAUNCH_COLUMNS:
        op.add_column("launches", sa.Column(name, sa.BigInteger(), nullable=True))
    op.add_column("launch_args", sa.Column("storage_bytes", sa.BigInteger(), nullable=True))
    op.execute(f"CREATE VIEW launch_overview AS {LAUNCH_OVERVIEW}")
    op.execute(f"CREATE VIEW oob_launches AS {OOB_LAUNCHES}")


def downgrade() -> None:
    # Plain ALTER TABLE DROP COLUMN (SQLite 3.35+), as 0004, 0005 and 0007 do: a batch copy of ``launches``
    # drops the table, and with foreign keys on (the alembic command line) that deletes every launch_args
    # and replay row. SQLite refuses the drop while a view names the table, so the views go first.
    _drop_views()
    op.execute("DROP VIEW run_overview")
    op.drop_column("launch_args", "storage_bytes")
    for name in reversed(_LAUNCH_COLUMNS):
        op.drop_column("launches", name)
    op.execute(f"CREATE VIEW launch_overview AS {LAUNCH_OVERVIEW_0002}")
    op.execute(f"CREATE VIEW oob_launches AS {OOB_LAUNCHES}")
    op.execute(f"CREATE VIEW run_overview AS {RUN_OVERVIEW_0002}")
