"""The views give JSON columns as text on every backend, so the documented queries run on PostgreSQL too.

On PostgreSQL the JSON columns have type ``json``, which has no equality operator: ``GROUP BY chosen`` and
``count(DISTINCT chosen)`` (docs/sql.md's autotune questions) failed there, while SQLite, which keeps JSON as
text, answered them. ``CAST(... AS TEXT)`` is the stored text on both (PostgreSQL's ``json`` keeps its input
text verbatim), so ``launch_overview.config`` and ``autotune_choices.chosen`` now say so, and the views give
the same rows everywhere. Column names and meanings are unchanged.

The views are rebuilt from their definitions as the database holds them now (not from 0002's text), so
columns a revision before this one added are kept. A later revision that re-creates these views must keep
the casts.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Creation order (oob_launches reads launch_overview); dropped in reverse.
ORDER = ("launch_overview", "oob_launches", "autotune_choices", "run_overview")
# view -> (table alias, JSON column it passes through)
JSON_COLUMNS = {"launch_overview": ("l", "config"), "autotune_choices": ("a", "chosen")}


def _definitions() -> dict[str, str]:
    """Each view's SELECT as the database keeps it."""
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        rows = bind.execute(sa.text("SELECT name, sql FROM sqlite_master WHERE type = 'view'"))
        head = re.compile(r"^\s*CREATE\s+VIEW\s+\S+\s+AS\s+", re.IGNORECASE | re.DOTALL)
        return {name: head.sub("", sql, count=1) for name, sql in rows}
    rows = bind.execute(
        sa.text("SELECT viewname, definition FROM pg_views WHERE schemaname = current_schema()")
    )
    return {name: definition.rstrip().rstrip(";") for name, definition in rows}


def _rebuild(change: dict[str, tuple[re.Pattern[str], str]]) -> None:
    views = _definitions()
    present = [name for name in ORDER if name in views]
    new = dict(views)
    for name, (pattern, replacement) in change.items():
        if name in views:
            new[name], count = pattern.subn(replacement, views[name], count=1)
            if count != 1:
                raise RuntimeError(f"view {name}: its JSON column was not found in {views[name]!r}")
    for name in reversed(present):
        op.execute(f"DROP VIEW {name}")
    for name in present:
        op.execute(f"CREATE VIEW {name} AS {new[name]}")


def upgrade() -> None:
    _rebuild(
        {
            view: (re.compile(rf"\b{alias}\.{column}\b(?:\s+AS\s+{column}\b)?"), f"CAST({alias}.{column} AS TEXT) AS {column}")
            for view, (alias, column) in JSON_COLUMNS.items()
        }
    )  # fmt: skip


def downgrade() -> None:
    _rebuild(
        {
            view: (
                re.compile(
                    rf"(?:CAST\(\s*{alias}\.{column}\s+AS\s+TEXT\s*\)|\(?{alias}\.{column}\)?::text)\s+AS\s+{column}\b",
                    re.IGNORECASE,
                ),
                f"{alias}.{column} AS {column}",
            )
            for view, (alias, column) in JSON_COLUMNS.items()
        }
    )  # fmt: skip
