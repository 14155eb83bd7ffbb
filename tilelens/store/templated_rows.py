"""Rows of templated compiled launches (``tilelens.core.compiled_templates``) written from a template's rows.

The writer process of a ``snapshots="none"`` recording receives thousands of launches of a few kinds. Building
each one's ``LaunchRecord``, its row dicts and then SQLAlchemy's parameters costs hundreds of microseconds of
Python per launch, more than a launch-bound program spends launching it. Here the first launch of a template
is written the usual way and its rows become the template's :class:`RowTemplate`: the launch row's and
argument rows' bound parameters (each value already through its column's bind processor, as
``tilelens.store.rowsql`` does). A later launch of that template copies them and sets what varies: its seq,
grid, start time, duration and creation time, and per argument the storage offset, storage group, storage
bytes (tensors) or value (scalars). A batch of them is one ``BEGIN IMMEDIATE`` transaction on the driver's
cursor.

Invariant: every row equals the one ``History.write_launches`` writes for the same launch, column by column
(``tests/unit/test_compiled_templates.py``). SQLite only (``History._rows``); anything else, and any refusal
(:class:`~tilelens.store.rowsql.Fallback`), is left to the usual path.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, cast

from sqlalchemy import Table

from tilelens.records import LaunchRecord, utcnow
from tilelens.store.jsonvalues import to_json
from tilelens.store.models import Launch, LaunchArg

_VARYING = (
    "seq",
    "grid_x",
    "grid_y",
    "grid_z",
    "started_at",
    "duration_s",
)  # per launch; created_at per batch


class RowTemplate:
    """A template's rows: parameters of the launch row and of each argument row, and where the varying
    values go. ``slots`` are the template's (parameter index, is a tensor), in flat-value order."""

    def __init__(
        self,
        writer: Any,
        launch: dict[str, Any],
        args: list[dict[str, Any]],
        slots: tuple[tuple[int, bool], ...],
        convert: Any,
    ) -> None:
        self.launch_ins = writer._insert(cast(Table, Launch.__table__), list(launch))
        self.launch_params = list(self.launch_ins.params(launch))
        columns = self.launch_ins.columns
        self.varying = tuple(
            (columns.index(c), self.launch_ins.processors[columns.index(c)]) for c in _VARYING
        )
        at = columns.index("created_at")
        self.created_at = (at, self.launch_ins.processors[at])
        self.arg_ins = None
        self.arg_params: list[list[Any]] = []
        self.slots = slots
        self.convert = convert  # a scalar -> the value its record holds (the capture's ``jsonable``)
        self.scalars: dict[tuple[type, Any], Any] = {}  # (type, value) -> its ``value`` column parameter
        if args:
            rows = [{**a, "launch_id": 0} for a in args]
            self.arg_ins = writer._insert(cast(Table, LaunchArg.__table__), list(rows[0]))
            self.arg_params = [list(self.arg_ins.params(r)) for r in rows]
            cols = self.arg_ins.columns
            procs = self.arg_ins.processors
            self.arg_at = {c: (cols.index(c), procs[cols.index(c)]) for c in cols}

    def launch_row(
        self, seq: int, grid: Any, started: float, duration: float, created: Any = None
    ) -> tuple[Any, ...]:
        """``created``: the creation time as its column's processor made it (``created_at``), the same for a
        batch written in one transaction; None: now."""
        params = list(self.launch_params)
        values = (
            seq,
            int(grid[0]),
            int(grid[1]),
            int(grid[2]),
            _dt.datetime.fromtimestamp(started, _dt.timezone.utc),
            float(duration),
        )
        for (i, p), v in zip(self.varying, values, strict=True):
            params[i] = v if p is None else p(v)
        params[self.created_at[0]] = self.created_param() if created is None else created
        return tuple(params)

    def created_param(self) -> Any:
        """``created_at`` for a row written now, as its column's processor makes it."""
        p = self.created_at[1]
        now = utcnow()
        return now if p is None else p(now)

    def arg_rows(self, launch_id: int, values: Any) -> list[tuple[Any, ...]]:
        rows = [list(r) for r in self.arg_params]
        at = self.arg_at
        lid, lid_p = at["launch_id"]
        off, off_p = at["storage_offset"]
        grp, grp_p = at["storage_group"]
        nb, nb_p = at["storage_bytes"]
        val, val_p = at["value"]
        groups: dict[int, int] = {}
        scalars = self.scalars
        j = 0
        for i, tensor in self.slots:
            row = rows[i]
            if tensor:
                offset, pointer, nbytes = values[j], values[j + 1], values[j + 2]
                j += 3
                row[off] = _bound(off_p, offset)
                row[grp] = _bound(grp_p, groups.setdefault(pointer, len(groups)))
                row[nb] = _bound(nb_p, int(nbytes))
            else:
                # A launch-bound program passes the same few scalar values again and again (sizes, strides,
                # eps): each one's JSON column value is made once. Keyed with its type: 1, 1.0 and True are
                # equal keys but different JSON.
                v = values[j]
                key = (type(v), v)
                bound = scalars.get(key, _UNSEEN)
                if bound is _UNSEEN:
                    bound = _bound(val_p, to_json(self.convert(v)))
                    if len(scalars) > 4096:
                        scalars.clear()
                    scalars[key] = bound
                row[val] = bound
                j += 1
        for row in rows:
            row[lid] = _bound(lid_p, launch_id)
        return [tuple(r) for r in rows]


_UNSEEN = object()


def _bound(processor: Any, value: Any) -> Any:
    return value if processor is None else processor(value)


def row_template(
    history: Any, run_id: int, rec: LaunchRecord, slots: Any, convert: Any
) -> RowTemplate | None:
    """The rows of ``rec`` (a template's first launch, already written, so its kernel row exists) as a
    template; None where this path is not taken (not SQLite). ``convert``: what a scalar's record holds
    (``tilelens.core.arguments.jsonable``: the store does not import the capture)."""
    writer = history._rows
    k = rec.kernel
    kernel_id = history._kernel_ids.get((k.module, k.qualname, k.source_sha256))
    if writer is None or kernel_id is None:
        return None
    refs, launch, args = history._launch_rows(run_id, rec)
    if refs:
        return None
    launch["kernel_id"] = kernel_id
    return RowTemplate(writer, launch, args, slots, convert)


def write_templated(
    history: Any, entries: list[tuple[RowTemplate, int, Any, float, float, Any]]
) -> list[int]:
    """Write ``(template, seq, grid, started, duration, values)`` launches in one transaction; their ids.
    Raises ``rowsql.Fallback`` (nothing written) on a refused row, ``sqlite3.OperationalError`` as is."""
    writer = history._rows

    def statements(cur: Any) -> list[int]:
        ids: list[int] = []
        args: dict[str, list[tuple[Any, ...]]] = {}
        created = entries[0][0].created_param() if entries else None  # one transaction: one creation time
        for template, seq, grid, started, duration, values in entries:
            cur.execute(template.launch_ins.sql, template.launch_row(seq, grid, started, duration, created))
            launch_id = cur.lastrowid
            if launch_id is None:
                from tilelens.store.rowsql import Fallback

                raise Fallback("no row id")
            ids.append(int(launch_id))
            if template.arg_ins is not None:
                args.setdefault(template.arg_ins.sql, []).extend(template.arg_rows(int(launch_id), values))
        for sql, rows in args.items():
            cur.executemany(sql, rows)
        return ids

    return cast("list[int]", writer._transaction(statements))
