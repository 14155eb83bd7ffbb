"""One truth about runs: every read of a history, SQL included, shows a dead run as ``lost``, writing nothing.

Whether a ``running`` run's process is gone is decided by :func:`tilelens.store.sql.liveness.effective_status`
(``/proc`` of this host: no rule the database could evaluate alone, nor a clock). Until the next writer stores
``lost``, the reading connection makes ``runs`` and ``run_overview`` say it, so that ``ls --runs``, ``show``,
``tilelens sql``, ``HistoryQuery.sql``, ``serve`` and ``trace_events`` queries all read the same status:

* **SQLite**: the read connection registers :data:`FUNCTION` (that rule, in Python) and creates TEMP views
  named ``runs`` and ``run_overview``, which shadow the stored table and view for every unqualified name (SQLite
  looks in ``temp`` first). Temp objects live in the connection's temp schema, never in the history's file;
  they are created before the connection becomes query-only and its authorizer refuses every CREATE and DROP.
  ``main.runs`` still names the stored rows.
* **PostgreSQL**: a read-only transaction (and the reader role of ``tilelens db grant-reader``) may create
  nothing, and the server cannot see this host's processes. So before a statement that names ``runs`` or
  ``run_overview`` runs, the reader finds which ``running`` runs of this host are gone, and when some are, the
  statement is rewritten on its parse tree: each such relation becomes a subquery of the same name and columns
  whose ``status`` says ``lost`` for those ids (:func:`rewrite_postgres`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tilelens.store.sql import liveness

#: The SQL function a SQLite read connection evaluates the rule with (``status`` and the process identity).
FUNCTION = "tilelens_run_status"
#: What the function takes, after ``status``: the columns of ``runs`` that say who recorded the run.
IDENTITY = ("host", "pid", "pid_start", "boot_id", "pid_ns")
#: The relations whose ``status`` a read corrects, and the column holding the run's id in each.
RELATIONS = {"runs": "id", "run_overview": "run_id"}


def status_function() -> Callable[..., str | None]:
    """The rule as a SQL function: :func:`liveness.effective_status`, this process identified once (again
    after a fork: a child is another process)."""
    here: dict[int, liveness.ProcessIdentity] = {}

    def status(
        stored: str | None, host: str | None, pid: Any, pid_start: Any, boot_id: Any, pid_ns: Any
    ) -> str | None:
        if stored != liveness.RUNNING or host is None or not isinstance(pid, int):
            return stored
        me = here.get(os.getpid())
        if me is None:
            here.clear()
            me = here[os.getpid()] = liveness.current_process()
        return liveness.effective_status(stored, host, pid, pid_start, boot_id, pid_ns, me)

    return status


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def shadow_sqlite(conn: Any) -> None:
    """Create the TEMP views ``runs`` and ``run_overview`` on a SQLite connection not yet made query-only.

    Each keeps the stored relation's columns in order (whatever the history's schema revision); only
    ``status`` is computed, and only a ``running`` row calls the function.
    """
    conn.create_function(FUNCTION, 1 + len(IDENTITY), status_function())
    columns = {
        name: [str(r[1]) for r in conn.execute(f"PRAGMA main.table_info({name})").fetchall()]
        for name in RELATIONS
    }
    have = columns["runs"]
    if "status" not in have or "id" not in have:
        return
    args = ", ".join(f"r.{_quote(c)}" if c in have else "NULL" for c in IDENTITY)
    status = f"CASE WHEN r.status = 'running' THEN {FUNCTION}(r.status, {args}) ELSE r.status END"
    select = ", ".join(f"{status} AS status" if c == "status" else f"r.{_quote(c)}" for c in have)
    conn.execute(f"CREATE TEMP VIEW runs AS SELECT {select} FROM main.runs r")
    overview = columns["run_overview"]
    if "status" in overview and "run_id" in overview:
        status = (
            "CASE WHEN o.status = 'running' "
            "THEN (SELECT t.status FROM temp.runs t WHERE t.id = o.run_id) ELSE o.status END"
        )
        select = ", ".join(f"{status} AS status" if c == "status" else f"o.{_quote(c)}" for c in overview)
        conn.execute(f"CREATE TEMP VIEW run_overview AS SELECT {select} FROM main.run_overview o")


_VIEW_WRITE = re.compile(r"cannot modify (\w+) because it is a view")
_WRITE_WORD = re.compile(r"\b(insert|update|delete|replace)\b", re.IGNORECASE)


def view_write(message: str, sql: str) -> str | None:
    """What a write to a TEMP view was (``DELETE runs``), from SQLite's message: it refuses one before the
    connection's authorizer is asked, so the write reads as a refused one like every other."""
    view = _VIEW_WRITE.search(message)
    if view is None:
        return None
    write = _WRITE_WORD.search(sql)
    return f"{write.group(1).upper() if write else 'write'} {view.group(1)}"


def lost_ids(rows: Iterable[Sequence[Any]], columns: Sequence[str]) -> list[int]:
    """The ids among ``runs`` rows (``SELECT *`` of some of them, with ``columns``) whose process is gone."""
    index = {name: i for i, name in enumerate(columns)}

    def get(row: Sequence[Any], name: str) -> Any:
        return row[index[name]] if name in index else None

    rule = status_function()
    lost = []
    for row in rows:
        pid, start = get(row, "pid"), get(row, "pid_start")
        pid = int(pid) if pid is not None else None
        start = int(start) if start is not None else None
        args = (get(row, "host"), pid, start, get(row, "boot_id"), get(row, "pid_ns"))
        if rule(get(row, "status"), *args) == liveness.LOST:
            lost.append(int(get(row, "id")))
    return sorted(lost)


# -- PostgreSQL: the statement rewritten ---------------------------------------------------------------------


def names_runs(statement: Any) -> bool:
    """Whether a parsed statement (pglast) names ``runs`` or ``run_overview`` anywhere."""
    return any(getattr(node, "relname", None) in RELATIONS for node in _nodes(statement))


def _nodes(node: Any) -> Iterable[Any]:
    from pglast.ast import Node

    if isinstance(node, (tuple, list)):
        for item in node:
            yield from _nodes(item)
    elif isinstance(node, Node):
        yield node
        fields: Any = node  # pglast's nodes declare their fields in __slots__
        for name in fields.__slots__:
            yield from _nodes(getattr(node, name))


def rewrite_postgres(statement: Any, schema: str, columns: dict[str, list[str]], lost: Sequence[int]) -> str:
    """``statement`` (pglast's tree of one statement) as SQL text, with each ``runs`` / ``run_overview`` it
    reads (unqualified or in ``schema``; not a CTE of that name) replaced by a subquery of the same name and
    ``columns`` whose ``status`` is ``lost`` for the ``lost`` ids. A column written ``schema.runs.x`` becomes
    ``runs.x``, the subquery's name. The tree is rewritten as pglast's plain-dict form, then printed."""
    import pglast
    from pglast import ast
    from pglast.stream import RawStream

    ids = ", ".join(str(int(i)) for i in lost)
    subqueries = {}
    for name, key in RELATIONS.items():
        if "status" not in columns.get(name, ()):
            continue
        select = ", ".join(
            f"CASE WHEN status = 'running' AND {key} IN ({ids}) THEN 'lost' ELSE status END AS status"
            if c == "status"
            else _quote(c)
            for c in columns[name]
        )
        text = f"SELECT {select} FROM {_quote(schema)}.{name}"
        parsed: Any = pglast.parse_sql(text)[0].stmt
        subqueries[name] = parsed()
    tree = _Rewriter(schema, subqueries).visit(statement())
    return str(RawStream()(getattr(ast, tree["@"])(tree)))


class _Rewriter:
    """A parse tree (pglast's dict form) with the relations ``subqueries`` names read through those subqueries,
    CTE names visible where PostgreSQL resolves them (in later CTEs, or all with RECURSIVE, and the query)."""

    def __init__(self, schema: str, subqueries: dict[str, dict[str, Any]]) -> None:
        self.schema = schema
        self.subqueries = subqueries
        self.ctes: list[frozenset[str]] = []

    def visit(self, node: Any) -> Any:
        if isinstance(node, (list, tuple)):
            return [self.visit(item) for item in node]
        if not isinstance(node, dict):
            return node
        kind = node.get("@")
        if kind == "RangeVar":
            return self._relation(node)
        if kind == "ColumnRef":
            return self._column(node)
        if kind == "SelectStmt" and node.get("withClause"):
            return self._with(node)
        return {key: self.visit(value) for key, value in node.items()}

    def _with(self, node: dict[str, Any]) -> dict[str, Any]:
        clause = node["withClause"]
        ctes = list(clause.get("ctes") or ())
        names = [cte["ctename"] for cte in ctes]
        new_ctes = []
        for i, cte in enumerate(ctes):
            self.ctes.append(frozenset(names if clause.get("recursive") else names[:i]))
            try:
                new_ctes.append({**cte, "ctequery": self.visit(cte["ctequery"])})
            finally:
                self.ctes.pop()
        self.ctes.append(frozenset(names))
        try:
            out = {key: self.visit(value) for key, value in node.items() if key != "withClause"}
        finally:
            self.ctes.pop()
        return {**out, "withClause": {**clause, "ctes": new_ctes}}

    def _relation(self, node: dict[str, Any]) -> dict[str, Any]:
        name = node.get("relname")
        if name not in self.subqueries or node.get("catalogname"):
            return node
        schema = node.get("schemaname")
        if schema is None and any(name in scope for scope in self.ctes):
            return node  # the statement's own CTE of that name
        if schema not in (None, self.schema):
            return node
        alias = node.get("alias") or {"@": "Alias", "aliasname": name}
        return {"@": "RangeSubselect", "lateral": False, "subquery": self.subqueries[name], "alias": alias}

    def _column(self, node: dict[str, Any]) -> dict[str, Any]:
        fields = list(node.get("fields") or ())
        names = [field.get("sval") if isinstance(field, dict) else None for field in fields]
        if len(names) == 3 and names[0] == self.schema and names[1] in self.subqueries:
            return {**node, "fields": fields[1:]}
        return node
