"""What a query can name: the history's tables and views with their columns (``tilelens tables``).

Read through the history's read-only connection, from the database's own catalog (``sqlite_master`` with
``pragma_table_info`` on SQLite, ``information_schema`` on PostgreSQL), so a history of any schema revision is
described as it is, each column with its line from :mod:`tilelens.store.sql.columns`: on SQLite the stored
``main`` objects, not the TEMP views that show ``lost`` runs (:mod:`tilelens.store.sql.runstatus`), which have
the same columns. ``trace_events`` (see :mod:`tilelens.store.read.tracesql`) is listed last, kind ``traces``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from tilelens.errors import QueryError, ViewsMissingError
from tilelens.store.sql.columns import describe
from tilelens.store.sql.readonly import Reader, known_revisions

#: The columns of ``trace_events``: ``tilelens.store.files.lanes.LANE_SCHEMA`` (``tilelens export``'s), then the
#: launch's kernel and run (tests keep them equal to both and to what DuckDB answers), named here so that
#: listing them imports no pyarrow.
TRACE_COLUMNS = (
    ("launch_id", "int64"), ("pid_x", "int32"), ("pid_y", "int32"), ("pid_z", "int32"), ("event", "int32"),
    ("op", "string"), ("arg", "int16"), ("arg_name", "string"), ("line", "int32"), ("lane", "int32"),
    ("offset", "int64"), ("active", "bool"), ("oob", "bool"), ("kernel", "string"), ("run_id", "int64"),
)  # fmt: skip

_SQLITE = (
    "SELECT m.name, m.type, p.name, p.type FROM sqlite_master m JOIN pragma_table_info(m.name, 'main') p "
    "WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite%' ORDER BY m.type, m.name, p.cid"
)
_INFORMATION_SCHEMA = (
    "SELECT c.table_name, CASE WHEN t.table_type = 'VIEW' THEN 'view' ELSE 'table' END, c.column_name, "
    "c.data_type FROM information_schema.columns c JOIN information_schema.tables t "
    "ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
    "WHERE c.table_schema = current_schema() ORDER BY 2, 1, c.ordinal_position"
)


@dataclass
class Column:
    name: str
    type: str  # as the database declares it (empty for a SQLite view's computed column)
    description: str = ""  # what it holds, one line (tilelens.store.sql.columns)


@dataclass
class TableInfo:
    name: str
    kind: str  # table, view or traces
    columns: list[Column] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def tables(reader: Reader) -> list[TableInfo]:
    """Tables, then views, by name; then ``trace_events``."""
    out: dict[str, TableInfo] = {}
    for name, kind, column, type_ in reader.execute(
        _SQLITE if reader.dialect == "sqlite" else _INFORMATION_SCHEMA
    ).rows:
        info = out.setdefault(str(name), TableInfo(str(name), str(kind)))
        info.columns.append(Column(str(column), str(type_ or "").lower(), describe(str(name), str(column))))
    columns = [Column(n, t, describe("trace_events", n)) for n, t in TRACE_COLUMNS]
    traces = TableInfo("trace_events", "traces", columns)
    return [*out.values(), traces]


def table_names(reader: Reader) -> list[str]:
    """The history's own tables and views (not ``trace_events``)."""
    if reader.dialect == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite%'"
    else:
        sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    return [str(r[0]) for r in reader.execute(sql).rows]


#: The views every head revision has (a missing one means the history is behind, or one was dropped by hand).
VIEW_NAMES = ("launch_overview", "oob_launches", "autotune_choices", "run_overview")


def views_missing(revisions: Sequence[str], exc: QueryError) -> ViewsMissingError | None:
    """The error names one of the views and the history's schema (``revisions``) predates them: say so."""
    match = re.search(r'no such table: (\w+)|relation "(\w+)" does not exist', str(exc))
    name = match and (match.group(1) or match.group(2))
    # Every view exists at this code's head revision, so ``db upgrade`` adds a missing one exactly when
    # the history is behind it. At the head, a missing view was dropped by hand, and upgrading does nothing.
    _, heads = known_revisions()
    if name not in VIEW_NAMES or set(revisions) == set(heads):
        return None
    return ViewsMissingError(f"{exc} (this history predates the views)")
