"""Which launches a ``trace_events`` query can see: its filters on launch, kernel and run, found before any trace
is read, so a query about one launch reads one trace and not the history's every one.

``trace_events`` is the lanes of every traced launch; ``launch_id``, ``kernel``, ``kernel_id`` and ``run_id``
are the same on every lane of a launch. A conjunct of the query's ``WHERE`` that reads only those columns of
``trace_events`` (``launch_id = 7``, ``kernel LIKE '%softmax%' AND run_id > 3``, ``launch_id IN (...)``) is as
true of the launch as of each of its lanes, so it may be evaluated once per launch, over the launch map, before
the lanes exist: standard predicate pushdown. It is pushed only where that is exact:

- one statement, a plain ``SELECT`` (no set operation, no ``WITH``) whose ``FROM`` holds ``trace_events`` once,
  as a table without renamed columns or a sample, and joins nothing to it but by inner and cross joins (an
  outer join would turn a missing lane into a NULL row the ``WHERE`` could then keep);
- ``trace_events`` named nowhere else in the text (a subquery reading it must see every launch);
- the conjunct reads no subquery and no volatile function, and its columns are ``trace_events``' own:
  qualified by its alias (or name) whenever the ``FROM`` joins anything.

Anything else pushes nothing, and every trace is read: slower, never wrong. DuckDB parses the statement
(``json_serialize_sql``) and renders the kept conjuncts back (``json_deserialize_sql``); the caller evaluates
them over the launch map on a connection that can reach no file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

TRACE_TABLE = "trace_events"
#: The columns of trace_events that are one value per launch.
LAUNCH_COLUMNS = frozenset({"launch_id", "kernel", "kernel_id", "run_id"})
VOLATILE = frozenset(
    {"random", "gen_random_uuid", "uuid", "uuidv4", "uuidv7", "setseed", "nextval", "currval"}
)
# A mention of the table, not a column qualified by its name (``trace_events.launch_id``).
_WORD = re.compile(r"\btrace_events\b(?!\s*\.)", re.IGNORECASE)


@dataclass(frozen=True)
class LaunchFilter:
    """A ``WHERE`` over the launch map: evaluate ``sql`` on a table aliased ``alias`` with LAUNCH_COLUMNS."""

    alias: str
    sql: str


def launch_filter(con: Any, query: str) -> LaunchFilter | None:
    """The part of ``query``'s ``WHERE`` that selects launches, or None when nothing can be pushed."""
    if len(_WORD.findall(query)) != 1:
        return None
    parsed = _parse(con, query)
    if parsed is None:
        return None
    node = parsed["statements"][0]["node"]
    if node.get("type") != "SELECT_NODE" or node["cte_map"]["map"] or node.get("sample"):
        return None
    found = _trace_table(node.get("from_table"))
    if found is None:
        return None
    alias, joined = found
    kept = [c for c in _conjuncts(node.get("where_clause")) if _pushable(c, alias, joined)]
    if not kept:
        return None
    quoted = alias.replace('"', '""')
    template = _parse(con, f'SELECT 1 FROM tl_launch_map AS "{quoted}" WHERE true')
    assert template is not None
    template["statements"][0]["node"]["where_clause"] = (
        kept[0]
        if len(kept) == 1
        else {"class": "CONJUNCTION", "type": "CONJUNCTION_AND", "alias": "", "children": kept}
    )
    (rendered,) = con.execute("SELECT json_deserialize_sql(?::JSON)", [json.dumps(template)]).fetchall()[0]
    where = rendered.split(" WHERE ", 1)[1]
    return LaunchFilter(alias, where)


def _parse(con: Any, query: str) -> dict[str, Any] | None:
    (text,) = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [query]).fetchall()[0]
    parsed: dict[str, Any] = json.loads(text)
    if parsed.get("error") or len(parsed.get("statements", ())) != 1:
        return None
    return parsed


def _trace_table(table: dict[str, Any] | None) -> tuple[str, bool] | None:
    """(alias, whether anything is joined) of the one plain trace_events in the FROM tree, else None."""
    if table is None:
        return None
    if table["type"] == "BASE_TABLE":
        if (
            table["table_name"].lower() != TRACE_TABLE
            or table.get("schema_name")
            or table.get("catalog_name")
            or table.get("column_name_alias")
            or table.get("sample")
            or table.get("at_clause")
        ):
            return None
        return (table.get("alias") or table["table_name"]), False
    if table["type"] != "JOIN" or table.get("join_type") != "INNER":
        return None
    if table.get("ref_type") not in ("REGULAR", "CROSS") or table.get("using_columns"):
        return None
    # Every join between the root and trace_events is inner; what is joined to it may be anything (the
    # one-mention rule keeps trace_events out of it).
    hits = [s for s in (_trace_table(table["left"]), _trace_table(table["right"])) if s is not None]
    return (hits[0][0], True) if len(hits) == 1 else None


def _conjuncts(expr: dict[str, Any] | None) -> list[dict[str, Any]]:
    if expr is None:
        return []
    if expr.get("class") == "CONJUNCTION" and expr.get("type") == "CONJUNCTION_AND":
        return [c for child in expr["children"] for c in _conjuncts(child)]
    return [expr]


def _pushable(expr: dict[str, Any], alias: str, joined: bool) -> bool:
    columns: list[list[str]] = []
    if not _walk(expr, columns):
        return False
    if not columns:
        return False
    for names in columns:
        if len(names) == 1 and not joined and names[0].lower() in LAUNCH_COLUMNS:
            continue
        if len(names) == 2 and names[0].lower() == alias.lower() and names[1].lower() in LAUNCH_COLUMNS:
            continue
        return False
    return True


def _walk(node: Any, columns: list[list[str]]) -> bool:
    """Collect column references; False at a subquery, a volatile function, a star or a lambda."""
    if isinstance(node, list):
        return all(_walk(item, columns) for item in node)
    if not isinstance(node, dict):
        return True
    kind = node.get("class")
    if kind in ("SUBQUERY", "STAR", "LAMBDA", "PARAMETER", "WINDOW", "LAMBDA_REF"):
        return False
    if kind == "COLUMN_REF":
        columns.append(list(node["column_names"]))
        return True
    if kind == "FUNCTION" and str(node.get("function_name", "")).lower() in VOLATILE:
        return False
    return all(_walk(value, columns) for key, value in node.items() if key != "column_names")
