"""The PostgreSQL ``sql`` gate's allowlist: a statement is parsed by PostgreSQL's own parser and runs only when
every part of it is known to be a pure read of TileLens's tables.

A denylist of function names cannot be complete: ``ts_rewrite(tsquery, text)`` runs a query given as text,
and a name can be assembled from strings (``'pg_'||'read_file'``) that a word check never sees. So nothing
is denied by name here; everything is allowed by name instead:

- the statement is parsed with ``pglast`` (libpg_query: the parser of the PostgreSQL server itself, compiled
  into the wheel), which gives the exact tree the server would build: quoting, ``U&"..."`` escapes, comments,
  dollar quotes and operator precedence are resolved exactly as the server resolves them;
- exactly one statement: a ``SELECT`` (``WITH``, ``VALUES``, ``TABLE`` included), an ``EXPLAIN`` of one, or a
  ``SHOW`` of a harmless setting;
- every node of the tree is of a type in :data:`NODE_TYPES` (expressions, joins, subqueries, CTEs, windows);
  ``SELECT INTO``, ``FOR UPDATE``, ``TABLESAMPLE``, XML and every other node type is refused;
- every function is in :data:`FUNCTIONS` (pure functions: arithmetic, text, dates, JSON, arrays, aggregates,
  window functions) and unqualified or qualified by ``pg_catalog``; every operator is in :data:`OPERATORS`;
  every type named by a cast or a ``TypeName`` is in :data:`TYPES` (no ``regproc``, ``regclass``,
  ``tsquery``...: their input functions look names up);
- every table is one of the history's own tables and views (:class:`Allowed`), unqualified or qualified by the
  history's schema, or a CTE of the statement; of the catalogs only ``information_schema``'s ``tables``,
  ``columns`` and ``views`` (names and types of what the role may read: ``tilelens tables``).

Text that only a dynamic-SQL function could run (``query_to_xml``, ``ts_rewrite``, ``xpath``...) never runs,
since no such function is allowed. The server's own refusals (a read-only transaction, a role without
privileges: see :func:`grant_reader_sql`) stay behind this gate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tilelens.errors import HistoryError, QueryError, ReadOnlyError

# Node types a pure read is made of (pglast's names for the server's parse nodes).
NODE_TYPES = frozenset(
    {
        "RawStmt", "SelectStmt", "ResTarget", "ColumnRef", "A_Star", "A_Const", "String", "Integer", "Float",
        "Boolean", "BitString", "A_Expr", "BoolExpr", "NullTest", "BooleanTest", "FuncCall", "TypeCast",
        "TypeName", "RangeVar", "JoinExpr", "Alias", "SortBy", "WithClause", "CommonTableExpr",
        "RangeSubselect", "RangeFunction", "SubLink", "CaseExpr", "CaseWhen", "CoalesceExpr", "MinMaxExpr",
        "A_Indirection", "A_Indices", "A_ArrayExpr", "RowExpr", "WindowDef", "SQLValueFunction",
        "GroupingSet", "ParamRef", "CollateClause", "NamedArgExpr", "ExplainStmt", "DefElem",
        "VariableShowStmt",
    }
)  # fmt: skip

# Pure functions of pg_catalog: no state read or changed outside their arguments, no name looked up, no text
# run as SQL, nothing outside the database reached.
FUNCTIONS = frozenset(
    {
        # aggregates and window functions
        "count", "sum", "avg", "min", "max", "bool_and", "bool_or", "every", "string_agg", "array_agg",
        "json_agg", "jsonb_agg", "json_object_agg", "jsonb_object_agg", "stddev", "stddev_pop",
        "stddev_samp", "variance", "var_pop", "var_samp", "percentile_cont", "percentile_disc", "mode",
        "bit_and", "bit_or", "corr", "covar_pop", "covar_samp", "regr_slope", "regr_intercept",
        "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead",
        "first_value", "last_value", "nth_value", "any_value",
        # numbers
        "abs", "ceil", "ceiling", "floor", "round", "trunc", "sign", "sqrt", "cbrt", "exp", "ln", "log",
        "log10", "power", "pow", "mod", "div", "pi", "degrees", "radians", "width_bucket", "gcd", "lcm",
        "scale", "greatest", "least", "num_nulls", "num_nonnulls",
        # text
        "length", "char_length", "character_length", "octet_length", "bit_length", "lower", "upper",
        "initcap", "substr", "substring", "left", "right", "trim", "btrim", "ltrim", "rtrim", "lpad", "rpad",
        "replace", "reverse", "repeat", "split_part", "strpos", "position", "concat", "concat_ws", "format",
        "md5", "sha224", "sha256", "sha384", "sha512", "starts_with", "translate", "regexp_replace",
        "regexp_match", "regexp_matches", "regexp_split_to_array", "regexp_split_to_table", "regexp_count",
        "regexp_like", "regexp_substr", "regexp_instr", "to_hex", "ascii", "chr", "encode", "decode",
        "string_to_array", "string_to_table", "array_to_string", "quote_ident", "quote_literal",
        "quote_nullable", "overlay", "similar_to_escape", "like_escape",
        # dates and times
        "now", "date_trunc", "date_part", "extract", "age", "to_char", "to_timestamp", "to_date",
        "to_number", "make_interval", "make_date", "make_time", "make_timestamp", "make_timestamptz",
        "clock_timestamp", "statement_timestamp", "transaction_timestamp", "justify_days", "justify_hours",
        "justify_interval", "isfinite", "date_bin", "timezone", "overlaps",
        # JSON
        "json_extract_path", "json_extract_path_text", "jsonb_extract_path", "jsonb_extract_path_text",
        "json_array_length", "jsonb_array_length", "json_each", "json_each_text", "jsonb_each",
        "jsonb_each_text", "json_array_elements", "json_array_elements_text", "jsonb_array_elements",
        "jsonb_array_elements_text", "json_object_keys", "jsonb_object_keys", "json_typeof", "jsonb_typeof",
        "to_json", "to_jsonb", "json_build_object", "jsonb_build_object", "json_build_array",
        "jsonb_build_array", "jsonb_pretty", "json_strip_nulls", "jsonb_strip_nulls", "jsonb_set",
        "jsonb_insert", "row_to_json", "array_to_json", "jsonb_path_query", "jsonb_path_query_array",
        "jsonb_path_query_first", "jsonb_path_exists", "jsonb_path_match", "json_object", "jsonb_object",
        # arrays and series
        "array_length", "cardinality", "unnest", "array_position", "array_positions", "array_append",
        "array_prepend", "array_cat", "array_remove", "array_replace", "array_lower", "array_upper",
        "array_ndims", "array_dims", "generate_series", "generate_subscripts", "trim_array",
        # type conversions the server also reaches through casts
        "int2", "int4", "int8", "float4", "float8", "numeric", "text", "bool", "date", "timestamp",
        "timestamptz", "interval", "convert_from", "convert_to",
        # the schema the history is in (no other session state)
        "current_schema",
    }
)  # fmt: skip

OPERATORS = frozenset(
    {
        "=", "<>", "!=", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "^", "|/", "||/", "@", "&", "|", "#",
        "~", "<<", ">>", "||", "~~", "!~~", "~~*", "!~~*", "~*", "!~", "!~*", "->", "->>", "#>", "#>>",
        "@>", "<@", "?", "?|", "?&", "&&", "#-", "@?", "@@",
        "BETWEEN", "NOT BETWEEN", "BETWEEN SYMMETRIC", "NOT BETWEEN SYMMETRIC",
    }
)  # fmt: skip

# Types a value may be cast to, or a function's type argument may name (``pg_catalog`` or unqualified).
# ``oid`` is a plain number and ``name`` a short string; the ``reg*`` types, whose casts look names up in the
# catalogs, are not here.
TYPES = frozenset(
    {
        "int2", "int4", "int8", "smallint", "integer", "int", "bigint", "numeric", "decimal", "real",
        "float4", "float8", "double precision", "float", "text", "varchar", "bpchar", "char", "character",
        "character varying", "bool", "boolean", "date", "time", "timetz", "timestamp", "timestamptz",
        "interval", "json", "jsonb", "jsonpath", "bytea", "uuid", "bit", "varbit", "oid", "name",
    }
)  # fmt: skip

# ``SHOW`` of these settings only: the rest may name server files, paths or other users.
SETTINGS = frozenset(
    {
        "server_version", "server_version_num", "server_encoding", "client_encoding", "timezone",
        "datestyle", "intervalstyle", "transaction_read_only", "transaction_isolation",
        "default_transaction_read_only", "statement_timeout", "standard_conforming_strings",
        "extra_float_digits", "integer_datetimes", "max_identifier_length", "lc_collate", "lc_ctype",
    }
)  # fmt: skip

# Catalog views that describe what the role may read, and nothing else (``tilelens tables`` reads them).
CATALOG_VIEWS = frozenset({"tables", "columns", "views"})

EXPLAIN_OPTIONS = frozenset(
    {"analyze", "verbose", "costs", "buffers", "timing", "summary", "format", "settings"}
)

# What a statement type refuses as (the one line a user sees names the verb that would have written).
_STATEMENT_VERBS = {
    "InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE", "MergeStmt": "MERGE",
    "CopyStmt": "COPY", "DoStmt": "DO", "CallStmt": "CALL", "TruncateStmt": "TRUNCATE",
    "VacuumStmt": "VACUUM", "VariableSetStmt": "SET", "TransactionStmt": "a transaction statement",
    "LockStmt": "LOCK", "NotifyStmt": "NOTIFY", "ListenStmt": "LISTEN", "LoadStmt": "LOAD",
    "DropStmt": "DROP", "CreateStmt": "CREATE", "CreateTableAsStmt": "CREATE", "ViewStmt": "CREATE",
    "IndexStmt": "CREATE", "CreateFunctionStmt": "CREATE", "AlterTableStmt": "ALTER",
    "PrepareStmt": "PREPARE", "ExecuteStmt": "EXECUTE", "DeclareCursorStmt": "DECLARE",
    "CheckPointStmt": "CHECKPOINT", "ClusterStmt": "CLUSTER", "ReindexStmt": "REINDEX",
    "RefreshMatViewStmt": "REFRESH", "GrantStmt": "GRANT", "GrantRoleStmt": "GRANT",
}  # fmt: skip


@dataclass(frozen=True)
class Allowed:
    """The relations a statement may read: the history's tables and views, in its schema."""

    relations: frozenset[str]
    schema: str = "public"


def refused(what: str) -> ReadOnlyError:
    return ReadOnlyError(f"refused {what}: the history is open read-only, nothing was changed")


def _parse(sql: str) -> Any:
    try:
        import pglast
    except ImportError as exc:  # the postgres extra brings it
        raise HistoryError(
            "reading a PostgreSQL history with SQL needs pglast (pip install 'tilelens[postgres]')"
        ) from exc
    try:
        return pglast.parse_sql(sql)
    except pglast.parser.ParseError as exc:
        message = str(exc.args[0] if exc.args else exc)
        raise QueryError(f"SQL error: {message.split(', at index')[0]}") from None


def parsed(sql: str) -> Any:
    """The parse tree of one statement, freshly made (a caller may change it): ``RawStmt.stmt``."""
    return _parse(sql)[0].stmt


def _names(items: Iterable[Any] | None) -> list[str]:
    return [getattr(item, "sval", "") for item in items or ()]


@lru_cache(maxsize=512)
def check_read(sql: str, allowed: Allowed) -> str:
    """Refuse ``sql`` unless it is one pure read of ``allowed``'s relations; return its kind
    (``SELECT``, ``EXPLAIN`` or ``SHOW``). Raises :class:`ReadOnlyError` naming what was refused, or
    :class:`QueryError` for text that is not one statement of PostgreSQL's grammar."""
    statements = _parse(sql)
    if not statements:
        raise QueryError("SQL error: no statement")
    if len(statements) > 1:
        raise QueryError("SQL error: one statement at a time")
    stmt = statements[0].stmt
    kind = type(stmt).__name__
    if kind == "VariableShowStmt":
        if (stmt.name or "").lower() not in SETTINGS:
            raise refused(f"SHOW {stmt.name}")
        return "SHOW"
    if kind == "ExplainStmt":
        for option in stmt.options or ():
            if option.defname not in EXPLAIN_OPTIONS:
                raise refused(f"EXPLAIN option {option.defname}")
        _Walker(allowed).statement(stmt.query)
        return "EXPLAIN"
    _Walker(allowed).statement(stmt)
    return "SELECT"


class _Walker:
    def __init__(self, allowed: Allowed) -> None:
        self.allowed = allowed
        self.scopes: list[frozenset[str]] = []  # the CTE names visible where the walk is

    def statement(self, node: Any) -> None:
        kind = type(node).__name__
        if kind != "SelectStmt":
            raise refused(_STATEMENT_VERBS.get(kind, kind.removesuffix("Stmt").upper() or kind))
        self.walk(node)

    def walk(self, node: Any) -> None:
        from pglast.ast import Node

        if isinstance(node, (tuple, list)):
            for item in node:
                self.walk(item)
            return
        if not isinstance(node, Node):
            return
        kind = type(node).__name__
        check = getattr(self, f"_{kind}", None)
        if kind not in NODE_TYPES:
            if kind in _STATEMENT_VERBS or kind.endswith("Stmt"):
                self.statement(node)
            raise refused(f"{kind} expressions")
        if check is not None:
            check(node)
        fields: Any = node  # pglast's nodes declare their fields in __slots__
        if kind == "SelectStmt" and fields.withClause is not None:
            self._with(fields)
            return
        for name in fields.__slots__:
            self.walk(getattr(fields, name))

    def _with(self, node: Any) -> None:
        """A WITH and its query, each CTE name visible exactly where the server resolves it to the CTE: in
        the later CTEs and the query (every CTE, with RECURSIVE); elsewhere the name is a table again."""
        ctes = list(node.withClause.ctes or ())
        names = [cte.ctename for cte in ctes]
        for i, cte in enumerate(ctes):
            self.scopes.append(frozenset(names if node.withClause.recursive else names[:i]))
            try:
                self.statement(cte.ctequery)
            finally:
                self.scopes.pop()
        self.scopes.append(frozenset(names))
        try:
            for name in node.__slots__:
                if name != "withClause":
                    self.walk(getattr(node, name))
        finally:
            self.scopes.pop()

    # -- the nodes that name something ----------------------------------------------------------------

    def _SelectStmt(self, node: Any) -> None:  # noqa: N802 - named after the node type
        if node.intoClause is not None:
            raise refused("SELECT INTO")
        if node.lockingClause:
            raise refused("SELECT FOR UPDATE")

    def _FuncCall(self, node: Any) -> None:  # noqa: N802
        names = _names(node.funcname)
        name = names[-1]
        if len(names) > 2 or (len(names) == 2 and names[0] != "pg_catalog") or name not in FUNCTIONS:
            raise refused(f"function {name}()")

    def _A_Expr(self, node: Any) -> None:  # noqa: N802
        self._operator(node.name)

    def _SubLink(self, node: Any) -> None:  # noqa: N802
        if node.operName:
            self._operator(node.operName)

    def _operator(self, name: Any) -> None:
        names = _names(name)
        if not names:
            return
        if len(names) > 2 or (len(names) == 2 and names[0] != "pg_catalog") or names[-1] not in OPERATORS:
            raise refused(f"operator {'.'.join(names)}")

    def _TypeName(self, node: Any) -> None:  # noqa: N802
        names = _names(node.names)
        name = names[-1] if names else ""
        if (len(names) == 2 and names[0] != "pg_catalog") or len(names) > 2 or name not in TYPES:
            raise refused(f"type {'.'.join(names)}")
        if node.pct_type or node.setof:
            raise refused(f"type {'.'.join(names)}")

    def _RangeVar(self, node: Any) -> None:  # noqa: N802
        name = node.relname
        if node.schemaname == "information_schema" and not node.catalogname and name in CATALOG_VIEWS:
            return
        if node.catalogname or (node.schemaname and node.schemaname != self.allowed.schema):
            raise refused(f"table {'.'.join(n for n in (node.catalogname, node.schemaname, name) if n)}")
        if node.schemaname is None and any(name in scope for scope in self.scopes):
            return
        if name not in self.allowed.relations:
            raise refused(f"table {name}")

    def _SQLValueFunction(self, node: Any) -> None:  # noqa: N802
        op = getattr(node.op, "name", str(node.op))
        if "DATE" not in op and "TIME" not in op:  # CURRENT_DATE, LOCALTIMESTAMP...; not the user's names
            raise refused(op.removeprefix("SVFOP_"))

    def _DefElem(self, node: Any) -> None:  # noqa: N802 - only EXPLAIN's options reach a walker
        raise refused(f"option {node.defname}")

    def _CollateClause(self, node: Any) -> None:  # noqa: N802
        names = _names(node.collname)
        if len(names) > 2 or (len(names) == 2 and names[0] != "pg_catalog"):
            raise refused(f"collation {'.'.join(names)}")
