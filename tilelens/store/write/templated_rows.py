"""Rows of templated compiled launches (``tilelens.core.compiled.templates``) written from a template's rows.

The writer process of a ``snapshots="none"`` recording receives thousands of launches of a few kinds. Building
each one's ``LaunchRecord``, its row dicts and then SQLAlchemy's parameters costs hundreds of microseconds of
Python per launch, more than a launch-bound program spends launching it. Here the first launch of a template
is written the usual way and its rows become the template's :class:`RowTemplate`: two INSERT statements of
its own, one for the launch row and one for all its argument rows, in which every value that does not vary
between the template's launches is already written out in the SQL text (each value first through its
column's bind processor, as ``tilelens.store.write.rowsql`` does). A later launch binds only what varies: its id,
seq, grid, start time, duration and creation time, and per argument its launch id and the storage offset,
storage group, storage bytes (tensors) or value (scalars): about 25 parameters instead of ~180.

Why it matters (measured, ``benchmarks.writer_throughput``): the writer process wrote ~105 µs per launch on
this project's 2-core machine, most of it binding constant parameters (each ``None`` costs the ``sqlite3``
module an adaptation attempt); a launch-bound program launching every ~60 µs then filled the writer's queue
and, past ``writer_process.QUEUE_SIZE`` launches, ran at the writer's speed. Later (callgrind, the same bench's
3,748 launches): 187.8k instructions a launch in the writer, 137.3k once the launches of one template in a
batch went in INSERTs of up to 16 launches' rows each (:meth:`Statement.times`: SQLite's cost per statement
execution, opening a cursor on the table and each index and ending the statement, had been paid per launch
row), the start time's text was made once a second (:func:`started_text`), each template's argument
parameters were kept per flat values and the launch row's integers bound as they are. SQLite's own statements
are most of what is left (~90k).

Launch ids are given, not left to SQLite: the batch's transaction (``BEGIN IMMEDIATE``, the database's write
lock) reads the table's largest id and numbers the batch's launches after it in seq order, which is the id
SQLite itself would give each of them inserted in that order. The launches of one template are then one
``executemany``, in any order between templates.

Invariant: every row equals the one ``History.write_launches`` writes for the same launch, column by column
and storage class by storage class (``tests/unit/test_templated_rows.py``, and the recording-level check in
``tests/unit/test_compiled_templates.py``). A constant is written into the SQL text only where that stores
exactly what binding it stores (NULL, integers of 64 bits, text without NUL that encodes as UTF-8); any other
constant (a float, bytes) stays a bound parameter. SQLite only (``History._rows``); anything else, and any
refusal (:class:`~tilelens.store.write.rowsql.Fallback`), is left to the usual path.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable
from itertools import chain
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import Table

from tilelens.records import LaunchRecord, utcnow
from tilelens.store.files.jsonvalues import to_json
from tilelens.store.sql.models import Launch, LaunchArg

# A launch row's varying columns, in parameter order (?1 ... ?8); the batch gives ``created_at``.
_VARYING = ("id", "seq", "grid_x", "grid_y", "grid_z", "started_at", "duration_s", "created_at")
_INT64 = 2**63 - 1
# Placeholders one statement may have on every SQLite (before 3.32 the limit was 999). A template past it (a
# kernel of hundreds of parameters) keeps the usual path: ``RawWriter._learn_rows`` records None for it.
MAX_PARAMETERS = 999
MAX_TIMES = 16  # executions' rows one INSERT takes at most (``Statement.times``)


class _Bound:
    """A cell of a statement bound per launch: parameter ``?n``."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n


def literal(value: Any) -> str | None:
    """``value`` (already through its column's bind processor) as SQL text that stores exactly what binding
    it stores, or None when it must stay bound. Integers beyond 64 bits are not literals (SQLite would read
    them as REAL; bound, they raise as before), nor text with a NUL (the statement would end there) or that
    does not encode as UTF-8."""
    if value is None:
        return "NULL"
    if type(value) is int and -_INT64 <= value <= _INT64:
        return str(value)
    if type(value) is str and "\x00" not in value:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return "'" + value.replace("'", "''") + "'"
    return None


class Statement:
    """An INSERT of fixed rows into ``table``: constants written in the text where :func:`literal` allows,
    the rest as ``?`` placeholders. ``order`` says what each placeholder takes, in order: ``n`` >= 0 the
    n-th varying value (a :class:`_Bound` cell, numbered from 1, may appear in several rows), -1 the next of
    ``consts``, the constants that stay bound. (Plain ``?``: ``sqlite3`` deprecates numbered placeholders with
    a sequence of parameters from Python 3.12, and refuses them from 3.14.)"""

    def __init__(self, table: str, columns: list[str], rows: list[list[Any]], varying: int) -> None:
        self._source = (table, columns, rows, varying)
        self._times: dict[int, Statement] = {1: self}
        consts: list[Any] = []
        order: list[int] = []
        tuples = []
        for row in rows:
            cells = []
            for cell in row:
                if type(cell) is _Bound:
                    if not 1 <= cell.n <= varying:
                        raise ValueError(f"bound cell {cell.n} outside 1..{varying}")
                    order.append(cell.n - 1)
                    cells.append("?")
                    continue
                text = literal(cell)
                if text is None:
                    consts.append(cell)
                    order.append(-1)
                    text = "?"
                cells.append(text)
            tuples.append("(" + ", ".join(cells) + ")")
        if len(order) > MAX_PARAMETERS:
            raise ValueError(
                f"{len(order)} parameters in one statement (SQLite may allow only {MAX_PARAMETERS})"
            )
        names = ", ".join(f'"{c}"' for c in columns)
        self.sql = f'INSERT INTO "{table}" ({names}) VALUES ' + ", ".join(tuples)
        self.consts = tuple(consts)
        # Each placeholder's index in ``varying + consts``; in order (each varying value once, in order, then
        # the constants), the parameters are that concatenation itself.
        picks, k = [], varying
        for i in order:
            picks.append(i if i >= 0 else k)
            k += i < 0
        self.in_order = picks == list(range(varying + len(consts)))
        self._pick = itemgetter(*picks) if len(picks) > 1 else (lambda row: tuple(row[i] for i in picks))

        # The most executions' rows one statement takes (a power of two up to MAX_TIMES, within the limit on
        # placeholders): see :meth:`times`.
        self.most = 1
        while self.most < MAX_TIMES and 2 * self.most * max(1, len(order)) <= MAX_PARAMETERS:
            self.most *= 2

    def params(self, varying: tuple[Any, ...]) -> tuple[Any, ...]:
        """The statement's parameters for the ``varying`` values of one execution (the n-th is ``_Bound(n)``'s)."""
        return varying + self.consts if self.in_order else self._pick(varying + self.consts)

    def times(self, k: int) -> Statement:
        """This statement's rows ``k`` times over in one INSERT, for ``k`` executions' varying values one after
        the other (``params`` of their concatenation). SQLite inserts the rows in the order written, so the
        rows and the ids SQLite gives them are those of ``k`` executions of this one in turn; one execution
        instead of ``k`` halves SQLite's work per launch row (callgrind: 48k -> 23k instructions a row of a
        table like ``launches``, 16 rows an execution), most of it a statement's own start and end."""
        known = self._times.get(k)
        if known is None:
            table, columns, rows, varying = self._source
            repeated = [
                [_Bound(c.n + j * varying) if type(c) is _Bound else c for c in row]
                for j in range(k)
                for row in rows
            ]
            known = self._times[k] = Statement(table, columns, repeated, varying * k)
        return known

    def insert_all(self, cur: Any, rows: list[tuple[Any, ...]]) -> None:
        """Execute this statement once for each of ``rows`` (varying values), in order, ``most`` executions'
        rows to an INSERT, then halves of that for the rest (at most one INSERT of each smaller size)."""
        at, size, n = 0, self.most, len(rows)
        while at < n:
            while size > n - at:
                size //= 2
            end = at + (n - at) // size * size
            if size == 1:
                cur.executemany(self.sql, [self.params(r) for r in rows[at:end]])
            else:
                many = self.times(size)
                cur.executemany(
                    many.sql,
                    [
                        many.params(tuple(chain.from_iterable(rows[j : j + size])))
                        for j in range(at, end, size)
                    ],
                )
            at = end


class RowTemplate:
    """A template's rows as two statements (:class:`Statement`): its launch row, and all its argument rows in
    one. ``slots`` are the template's (parameter index, is a tensor), in flat-value order."""

    def __init__(
        self,
        writer: Any,
        launch: dict[str, Any],
        args: list[dict[str, Any]],
        slots: tuple[tuple[int, bool], ...],
        convert: Any,
    ) -> None:
        launch = {**launch, "id": 0}
        ins = writer.insert(cast(Table, Launch.__table__), list(launch))
        processed = dict(zip(ins.columns, ins.params(launch), strict=True))
        at = {c: _Bound(i + 1) for i, c in enumerate(_VARYING)}
        columns = [*_VARYING, *(c for c in ins.columns if c not in at)]  # bound first: in order
        self.launch = Statement(
            "launches", columns, [[at.get(c, processed[c]) for c in columns]], len(_VARYING)
        )
        procs = dict(zip(ins.columns, ins.processors, strict=True))
        self.processors = tuple(procs[c] for c in _VARYING[1:])  # seq .. created_at
        self.started_text = started_text(started_processor(writer.engine.dialect))
        p_seq, p_x, p_y, p_z, _p_started, p_duration, _p_created = self.processors
        self.plain = all(p is None for p in (p_seq, p_x, p_y, p_z))  # SQLite's integers bind as they are
        # SQLite's float column has a processor (``to_float``): what it makes of the launch's float.
        self.duration: Callable[[float], Any] = float if p_duration is None else p_duration
        self.args: Statement | None = None
        self.slots = slots
        self.convert = convert  # a scalar -> the value its record holds (the capture's ``jsonable``)
        self.scalars: dict[tuple[type, Any], Any] = {}  # (type, value) -> its ``value`` column parameter
        self.tails: dict[
            tuple[Any, ...], tuple[Any, ...]
        ] = {}  # flat values -> ``arg_varying``'s after the id
        if args:
            rows = [{**a, "launch_id": 0} for a in args]
            arg_ins = writer.insert(cast(Table, LaunchArg.__table__), list(rows[0]))
            cols = list(arg_ins.columns)
            p = dict(zip(cols, arg_ins.processors, strict=True))
            self.arg_processors = (p["storage_offset"], p["storage_group"], p["storage_bytes"], p["value"])
            cells = [dict(zip(cols, arg_ins.params(r), strict=True)) for r in rows]
            n = 1
            for row in cells:
                row["launch_id"] = _Bound(1)
            for i, tensor in slots:
                for c in ("storage_offset", "storage_group", "storage_bytes") if tensor else ("value",):
                    n += 1
                    cells[i][c] = _Bound(n)
            self.args = Statement("launch_args", cols, [[row[c] for c in cols] for row in cells], n)

    def launch_varying(
        self, launch_id: int, seq: int, grid: Any, started: float, duration: float, created: Any = None
    ) -> tuple[Any, ...]:
        """The launch statement's varying values (its parameters are ``launch.params`` of them). ``created``:
        the creation time as its column's processor made it (``created_param``), the same for a batch written
        in one transaction; None: now."""
        if created is None:
            created = self.created_param()
        if self.plain:
            return (
                launch_id,
                seq,
                int(grid[0]),
                int(grid[1]),
                int(grid[2]),
                self.started_text(started),
                self.duration(float(duration)),
                created,
            )
        p_seq, p_x, p_y, p_z = self.processors[:4]
        return (
            launch_id,
            _bound(p_seq, seq),
            _bound(p_x, int(grid[0])),
            _bound(p_y, int(grid[1])),
            _bound(p_z, int(grid[2])),
            self.started_text(started),
            self.duration(float(duration)),
            created,
        )

    def created_param(self) -> Any:
        """``created_at`` for a row written now, as its column's processor makes it."""
        p = self.processors[-1]
        now = utcnow()
        return now if p is None else p(now)

    def arg_varying(self, launch_id: int, values: Any) -> tuple[Any, ...]:
        """The argument statement's varying values for launch ``launch_id`` with flat ``values`` (its parameters
        are ``args.params`` of them).

        A launch-bound program launches each layer with the same values step after step (the caching
        allocator hands back the same addresses; sizes, offsets and scalars repeat), so the parameters
        after the launch id are kept per ``values``, keyed with each value's type too (1, 1.0 and True are
        equal keys but different rows)."""
        key = (tuple(values), tuple(map(type, values)))
        tail = self.tails.get(key)
        if tail is None:
            tail = self._arg_tail(values)
            if len(self.tails) > 4096:
                self.tails.clear()
            self.tails[key] = tail
        return (launch_id, *tail)

    def _arg_tail(self, values: Any) -> tuple[Any, ...]:
        off_p, grp_p, nb_p, val_p = self.arg_processors
        plain = off_p is None and grp_p is None and nb_p is None  # integer columns: no conversion
        params: list[Any] = []
        groups: dict[int, int] = {}
        scalars = self.scalars
        j = 0
        for _i, tensor in self.slots:
            if tensor:
                offset, pointer, nbytes = values[j], values[j + 1], values[j + 2]
                j += 3
                group = groups.setdefault(pointer, len(groups))
                if plain:
                    params += (offset, group, int(nbytes))
                else:
                    params += (_bound(off_p, offset), _bound(grp_p, group), _bound(nb_p, int(nbytes)))
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
                params.append(bound)
                j += 1
        return tuple(params)


_UNSEEN = object()


def started_processor(dialect: Any) -> Any:
    """What makes ``launches.started_at``'s parameter from an aware UTC datetime on ``dialect``: the column
    type's own dialect processor, without ``models.UTCDateTime``'s step, which passes such a datetime on with
    the same fields (``astimezone(utc)``): the same text, for less per launch."""
    started = Launch.__table__.c.started_at.type
    impl = getattr(started, "impl", None)
    return (impl.dialect_impl(dialect) if impl is not None else started).bind_processor(dialect)


def started_text(processor: Any) -> Callable[[float], Any]:
    """What makes ``launches.started_at``'s parameter from a start time in seconds since the epoch: what
    ``processor`` (:func:`started_processor`) makes of its aware UTC datetime.

    Where that is SQLAlchemy's SQLite text (``YYYY-MM-DD HH:MM:SS.ffffff``, checked on times at the edges of
    its fields), the text up to the seconds is made once per second and the microseconds are appended:
    ``datetime.fromtimestamp``'s own split (``modf``, the fraction rounded half to even, carried into the
    seconds at 10**6). Formatting the seven fields per launch cost the writer process ~15k instructions a
    launch (as SQLAlchemy's %-formatting or ``datetime.isoformat``, alike); this costs a few hundred."""

    def usual(epoch: float) -> Any:
        when = _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc)
        return when if processor is None else processor(when)

    kept: list[tuple[float, str]] = [(math.nan, "")]  # (a whole second, its text up to the microseconds)

    def per_second(epoch: float) -> str:
        fraction, whole = math.modf(epoch)
        micro = round(fraction * 1e6)
        if micro >= 1_000_000:
            whole, micro = whole + 1.0, micro - 1_000_000
        elif micro < 0:
            whole, micro = whole - 1.0, micro + 1_000_000
        second, head = kept[0]
        if second != whole:
            head = usual(whole)[:20]
            kept[0] = (whole, head)
        return f"{head}{micro:06d}"

    probes = (0.0, 1.5, -1.5, 59.999999, 59.9999995, 1764597138.000001, 1764597138.9999996, 2**31 + 0.25)
    if processor is None:
        return usual
    texts = [usual(e) for e in probes]
    if all(type(t) is str and len(t) == 26 and t[19] == "." for t in texts) and all(
        per_second(e) == t for e, t in zip(probes, texts)
    ):
        return per_second
    return usual


def _bound(processor: Any, value: Any) -> Any:
    return value if processor is None else processor(value)


def row_template(
    history: Any, run_id: int, rec: LaunchRecord, slots: Any, convert: Any
) -> RowTemplate | None:
    """The rows of ``rec`` (a template's first launch, already written, so its kernel row exists) as a
    template; None where this path is not taken (not SQLite). ``convert``: what a scalar's record holds
    (``tilelens.core.kernel.arguments.jsonable``: the store does not import the capture)."""
    writer = history.cursor_writer
    kernel_id = history.kernel_ids.get(rec.kernel)
    if writer is None or kernel_id is None:
        return None
    refs, launch, args = history.launch_rows(run_id, rec)
    # The kernel's bundle is the same blob for every launch of the template, its row written with the first
    # launch (already committed); any other blob varies per launch.
    if set(refs) - {launch.get("bundle_blob")}:
        return None
    launch["kernel_id"] = kernel_id
    return RowTemplate(writer, launch, args, slots, convert)


def write_templated(
    history: Any, entries: list[tuple[RowTemplate, int, Any, float, float, Any]]
) -> list[int]:
    """Write ``(template, seq, grid, started, duration, values)`` launches in one transaction; their ids, in
    order. Raises ``rowsql.Fallback`` (nothing written) on a refused row, ``sqlite3.OperationalError`` as is."""
    writer = history.cursor_writer

    def statements(cur: Any) -> list[int]:
        # Under the write lock: nobody else can insert a launch before this transaction ends.
        largest = cur.execute('SELECT max("id") FROM "launches"').fetchone()[0]
        first = 1 if largest is None else int(largest) + 1
        created = entries[0][0].created_param() if entries else None  # one transaction: one creation time
        launches: dict[RowTemplate, list[tuple[Any, ...]]] = {}
        args: dict[RowTemplate, list[tuple[Any, ...]]] = {}
        for i, (template, seq, grid, started, duration, values) in enumerate(entries):
            launch_id = first + i
            rows = launches.get(template)
            if rows is None:
                rows = launches[template] = []
            rows.append(template.launch_varying(launch_id, seq, grid, started, duration, created))
            if template.args is not None:
                rows = args.get(template)
                if rows is None:
                    rows = args[template] = []
                rows.append(template.arg_varying(launch_id, values))
        for template, rows in launches.items():
            template.launch.insert_all(cur, rows)
        for template, rows in args.items():
            template.args.insert_all(cur, rows)  # type: ignore[union-attr]  # args is not None here
        return list(range(first, first + len(entries)))

    return cast("list[int]", writer.transaction(statements))
