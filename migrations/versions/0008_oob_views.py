"""The views show 0003's out-of-bounds split again, beside 0007's ``test_nodeid``.

Revision 0003 added ``oob_load_lanes``, ``oob_store_lanes`` and ``dropped_lanes`` to ``launch_overview`` (and
``oob_launches``, which reads it); revision 0007 re-created those views from revision 0002's columns plus
``test_nodeid``, which left the split out. Both are re-created here with every column: 0007's, in its order,
then the three split columns appended (appending keeps ``SELECT *`` consumers' column order). No table changes.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
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
    l.test_nodeid AS test_nodeid,
    l.oob_load_lanes AS oob_load_lanes,
    l.oob_store_lanes AS oob_store_lanes,
    l.dropped_lanes AS dropped_lanes
FROM launches l
JOIN kernels k ON k.id = l.kernel_id
JOIN runs r ON r.id = l.run_id
"""

OOB_LAUNCHES = "SELECT * FROM launch_overview WHERE oob_lanes > 0"

# (name, SELECT) in creation order: ``oob_launches`` reads ``launch_overview``. ``run_overview`` is 0007's.
VIEWS = (("launch_overview", LAUNCH_OVERVIEW), ("oob_launches", OOB_LAUNCHES))


def _drop_views() -> None:
    for name, _ in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    _drop_views()
    for name, select in VIEWS:
        op.execute(f"CREATE VIEW {name} AS {select}")


def downgrade() -> None:
    _drop_views()
    # Back to revision 0007's definitions, read from that migration itself.
    spec = importlib.util.spec_from_file_location("_tilelens_0007", Path(__file__).with_name("0007_procs.py"))
    assert spec is not None and spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    for name, select in old.VIEWS:
        if name in dict(VIEWS):
            op.execute(f"CREATE VIEW {name} AS {select}")
