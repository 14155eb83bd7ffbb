"""The WHERE clauses of the listing queries (``ls``): launches by kernel, run, status, out-of-bounds lanes,
tag and pytest test; and the tests those launches came from (``ls --test`` without a pattern)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilelens.errors import UsageError
from tilelens.records import LAUNCH_STATUSES
from tilelens.store.read.results import TestSummary
from tilelens.store.sql.readonly import row_limit, storable_id

Rows = Callable[[str, dict[str, Any]], Sequence[tuple[Any, ...]]]


def like(pattern: str) -> str:
    """A node-id pattern as SQL LIKE: ``*``/``?`` wildcards, else a substring; ``%``, ``_`` match themselves."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    if "*" not in pattern and "?" not in pattern:
        return f"%{escaped}%"
    return escaped.replace("*", "%").replace("?", "_")


@dataclass
class Filter:
    """WHERE clauses and their parameters, built up by the listing methods."""

    clauses: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)

    def add(self, clause: str, **params: Any) -> None:
        self.clauses.append(clause)
        self.params.update(params)

    def sql(self) -> str:
        return f"WHERE {' AND '.join(self.clauses)}" if self.clauses else ""


def in_list(ids: Sequence[int], prefix: str = "i") -> tuple[str, dict[str, int]]:
    """``:i0, :i1, ...`` and their values: an SQL ``IN (...)`` list as bound parameters (``prefix`` keeps two
    lists of one statement apart)."""
    params = {f"{prefix}{n}": int(value) for n, value in enumerate(ids)}
    return ", ".join(f":{name}" for name in params), params


def kernel_clause(f: Filter, ids: list[int], column: str) -> bool:
    """``column`` is one of the kernels ``ids``; False (nothing can match) when there are none."""
    if not ids:
        return False
    marks, params = in_list(ids, "k")
    f.add(f"{column} IN ({marks})", **params)
    return True


def launch_filter(
    kernel_ids: Callable[[str], list[int]],
    kernel: str | None,
    run: int | None,
    status: str | None,
    oob: bool,
    tag: str | None,
    test: str | None,
) -> Filter | None:
    """The WHERE clause over ``launches l`` that every filter given must hold; None when nothing can match."""
    if status is not None and status not in LAUNCH_STATUSES:
        raise UsageError(f"launch status must be one of {', '.join(LAUNCH_STATUSES)}, not {status!r}")
    f = Filter()
    if kernel is not None and not kernel_clause(f, kernel_ids(kernel), "l.kernel_id"):
        return None
    if run is not None:
        if not storable_id(run):
            return None
        f.add("l.run_id = :run", run=run)
    if status is not None:
        f.add("l.status = :status", status=status)
    if oob:
        f.add("l.oob_lanes > 0")
    if tag is not None:
        f.add("l.run_id IN (SELECT id FROM runs WHERE tag = :tag)", tag=tag)
    if test is not None:
        f.add("l.test_nodeid LIKE :test ESCAPE '\\'", test=like(test))
    return f


def test_summaries(rows: Rows, f: Filter, limit: int | None) -> list[TestSummary]:
    """The tests that made the launches ``f`` keeps, the one with the newest launch first."""
    f.add("l.test_nodeid IS NOT NULL")
    sql = (
        "SELECT l.test_nodeid, COUNT(*), COUNT(DISTINCT l.kernel_id), "
        "SUM(CASE WHEN l.status = 'error' THEN 1 ELSE 0 END), SUM(l.oob_lanes), MAX(l.id) "
        f"FROM launches l {f.sql()} GROUP BY l.test_nodeid ORDER BY MAX(l.id) DESC"
    )
    if limit is not None:
        sql += " LIMIT :limit"
        f.params["limit"] = row_limit(limit)
    return [
        TestSummary(str(r[0]), int(r[1]), int(r[2]), int(r[3] or 0), int(r[4] or 0), int(r[5]))
        for r in rows(sql, f.params)
    ]
