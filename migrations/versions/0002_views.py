"""Views for ``tilelens sql`` and any SQL client: launches with kernel names and configs, autotune choices,
out-of-bounds launches, runs with their counts.

The common questions should not need four-table joins. The SQL is plain so one definition serves every
backend: ``||``, ``CAST(... AS TEXT)`` and ``json_array_length`` mean the same in SQLite and PostgreSQL.
docs/sql.md documents the columns; renaming one is a breaking change. A later migration that rebuilds one of
the underlying tables keeps these working (SQLite migrations run with ``legacy_alter_table``); one that
renames or drops a column they read must drop and re-create them.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
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
    r.tag AS tag
FROM launches l
JOIN kernels k ON k.id = l.kernel_id
JOIN runs r ON r.id = l.run_id
"""

OOB_LAUNCHES = "SELECT * FROM launch_overview WHERE oob_lanes > 0"

AUTOTUNE_CHOICES = """
SELECT
    a.id AS event_id,
    a.run_id AS run_id,
    a.launch_id AS launch_id,
    k.module || '.' || k.qualname AS kernel,
    k.source_sha256 AS source_sha256,
    a.tuning_key AS tuning_key,
    a.chosen AS chosen,
    json_array_length(a.configs) AS configs,
    a.cache_hit AS cache_hit,
    a.created_at AS created_at
FROM autotune_events a
JOIN kernels k ON k.id = a.kernel_id
"""

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
    COALESCE(SUM(l.oob_lanes), 0) AS oob_lanes
FROM runs r
LEFT JOIN launches l ON l.run_id = r.id
GROUP BY r.id, r.started_at, r.finished_at, r.status, r.exit_code, r.tag
"""

# (name, SELECT) in creation order: ``oob_launches`` reads ``launch_overview``.
VIEWS = (
    ("launch_overview", LAUNCH_OVERVIEW),
    ("oob_launches", OOB_LAUNCHES),
    ("autotune_choices", AUTOTUNE_CHOICES),
    ("run_overview", RUN_OVERVIEW),
)


def upgrade() -> None:
    for name, select in VIEWS:
        op.execute(f"CREATE VIEW {name} AS {select}")


def downgrade() -> None:
    for name, _ in reversed(VIEWS):
        op.execute(f"DROP VIEW {name}")
