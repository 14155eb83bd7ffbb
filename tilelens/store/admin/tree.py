"""A run and the runs of the child processes it started, counted together.

``tilelens record`` and ``pytest --tilelens`` report the whole process tree: a program's workers record into
runs of their own (``runs.parent_run_id``), and the user asked about the program. The tree is walked with a
recursive CTE, which SQLite and PostgreSQL both run.

When the top-level recording ends it closes its tree (:func:`close_lost_children`): a child ended by
SIGKILL, ``os._exit`` or ``Pool.terminate`` never wrote how it ended, and is stored as ``lost`` then, not at
some later open of the history. Whether a child's process is gone is decided by :mod:`tilelens.store.sql.liveness`
alone; a child still alive (a fork outliving its parent) stays ``running`` and finishes its own run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text

_TREE = """
WITH RECURSIVE tree(id) AS (
    SELECT id FROM runs WHERE id = :run
    UNION
    SELECT r.id FROM runs r JOIN tree t ON r.parent_run_id = t.id
)
"""


@dataclass
class TestCounts:
    nodeid: str
    launches: int
    kernels: int
    oob_lanes: int


@dataclass
class TreeSummary:
    """Totals over a run and every run below it."""

    run_ids: list[int]
    launches_per_kernel: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    oob_lanes: int = 0
    oob_load_lanes: int = 0  # oob_lanes of loads, and of stores and atomics (unknown before schema 0003: 0)
    oob_store_lanes: int = 0
    dropped_lanes: int = 0  # store/atomic lanes outside every argument's memory, never written
    tests: list[TestCounts] = field(default_factory=list)  # per pytest node id, in node-id order

    @property
    def launches(self) -> int:
        return sum(self.launches_per_kernel.values())

    @property
    def child_runs(self) -> int:
        return len(self.run_ids) - 1


def tree_run_ids(history: Any, run_id: int) -> list[int]:
    """Run ``run_id`` and every run below it, in id order."""
    with history.engine.connect() as conn:
        return [
            int(r[0]) for r in conn.execute(text(f"{_TREE} SELECT id FROM tree ORDER BY id"), {"run": run_id})
        ]


def close_lost_children(history: Any, run_id: int) -> list[int]:
    """Store as ``lost`` the ``running`` runs below ``run_id`` whose process is gone; return their ids.

    Run ``run_id`` itself is never touched: it is the caller's, and the caller is alive.
    """
    below = [i for i in tree_run_ids(history, run_id) if i != run_id]
    return history.repair_lost_runs(among=below) if below else []


def run_tree(history: Any, run_id: int) -> TreeSummary:
    """Counts for run ``run_id`` and its descendants in ``history`` (a :class:`tilelens.store.History`)."""
    params = {"run": run_id}
    with history.engine.connect() as conn:
        ids = [int(r[0]) for r in conn.execute(text(f"{_TREE} SELECT id FROM tree ORDER BY id"), params)]
        summary = TreeSummary(run_ids=ids)
        for name, n, errors, oob, loaded, stored, dropped in conn.execute(
            text(
                f"{_TREE} SELECT k.module || '.' || k.qualname, COUNT(*), "
                "SUM(CASE WHEN l.status = 'error' THEN 1 ELSE 0 END), SUM(l.oob_lanes), "
                "SUM(l.oob_load_lanes), SUM(l.oob_store_lanes), SUM(l.dropped_lanes) "
                "FROM launches l JOIN kernels k ON k.id = l.kernel_id "
                "WHERE l.run_id IN (SELECT id FROM tree) GROUP BY k.module, k.qualname"
            ),
            params,
        ):
            summary.launches_per_kernel[name] += int(n)
            summary.errors += int(errors or 0)
            summary.oob_lanes += int(oob or 0)
            summary.oob_load_lanes += int(loaded or 0)
            summary.oob_store_lanes += int(stored or 0)
            summary.dropped_lanes += int(dropped or 0)
        for nodeid, n, kernels, oob in conn.execute(
            text(
                f"{_TREE} SELECT l.test_nodeid, COUNT(*), COUNT(DISTINCT l.kernel_id), SUM(l.oob_lanes) "
                "FROM launches l WHERE l.run_id IN (SELECT id FROM tree) AND l.test_nodeid IS NOT NULL "
                "GROUP BY l.test_nodeid ORDER BY l.test_nodeid"
            ),
            params,
        ):
            summary.tests.append(TestCounts(nodeid, int(n), int(kernels), int(oob or 0)))
    return summary
