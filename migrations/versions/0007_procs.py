"""Child processes and tests: ``runs.parent_run_id`` links a child process's run to the run that started it,
``launches.test_nodeid`` names the pytest test a launch ran in. ``launch_overview`` (and ``oob_launches``,
which reads it) are re-created to show ``test_nodeid``; ``run_overview`` to show ``parent_run_id``.

Both columns are nullable: runs and launches recorded before this revision have neither.

Revision ID: 0007
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LAUNCH_OVERVIEW = """
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
    r.tag AS tag,
    l.test_nodeid AS test_nodeid
FROM launches l
JOIN kernels k ON k.id = l.kernel_id
JOIN runs r ON r.id = l.run_id
"""

OOB_LAUNCHES = "SELECT * FROM launch_overview WHERE oob_lanes > 0"

RUN_OVERVIEW = """
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
    COALESCE(SUM(l.oob_lanes), 0) AS oob_lanes,
    r.parent_run_id AS parent_run_id,
    r.pid AS pid
FROM runs r
LEFT JOIN launches l ON l.run_id = r.id
GROUP BY r.id, r.started_at, r.finished_at, r.status, r.exit_code, r.tag, r.parent_run_id, r.pid
"""

# (name, SELECT) in creation order: ``oob_launches`` reads ``launch_overview``.
VIEWS = (("launch_overview", LAUNCH_OVERVIEW), ("oob_launches", OOB_LAUNCHES), ("run_overview", RUN_OVERVIEW))


def _drop_views() -> None:
    for name, _ in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    _drop_views()
    op.add_column("runs", sa.Column("parent_run_id", sa.Integer(), nullable=True))
    op.create_index("ix_runs_parent_run_id", "runs", ["parent_run_id"])
    op.add_column("launches", sa.Column("test_nodeid", sa.Text(), nullable=True))
    op.create_index("ix_launches_test_nodeid", "launches", ["test_nodeid"])
    for name, select in VIEWS:
        op.execute(f"CREATE VIEW {name} AS {select}")


def downgrade() -> None:
    _drop_views()
    op.drop_index("ix_launches_test_nodeid", table_name="launches")
    op.drop_index("ix_runs_parent_run_id", table_name="runs")
    # Plain ALTER TABLE DROP COLUMN (SQLite 3.35+), as 0004 and 0005 do: a batch copy of ``runs`` drops and
    # re-creates the table, which the launches' foreign keys would follow.
    op.drop_column("launches", "test_nodeid")
    op.drop_column("runs", "parent_run_id")
    # Back to revision 0002's definitions, read from that migration itself.
    spec = importlib.util.spec_from_file_location("_tilelens_0002", Path(__file__).with_name("0002_views.py"))
    assert spec is not None and spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    for name, select in old.VIEWS:
        if name != "autotune_choices":  # never dropped here
            op.execute(f"CREATE VIEW {name} AS {select}")
