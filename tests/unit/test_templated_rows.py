"""Templated launches' rows (``tilelens.store.write.templated_rows``): constants written into the SQL text store
exactly what binding them stores, and a recording written from templates holds the rows, storage class by
storage class, that the usual path writes, with ids SQLite itself would have given."""

from __future__ import annotations

import datetime as dt
import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import torch
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect

import tilelens
from tilelens.store.sql.models import Launch
from tilelens.store.write import templated_rows
from tilelens.store.write.templated_rows import Statement, literal

from .test_compiled_fast_path import tuned_add
from .test_compiled_recording import scale_kernel
from .test_compiled_templates import StableTritonLike

# Column types whose affinities SQLite knows (JSON and DATETIME are NUMERIC, as TileLens's columns declare).
_COLUMNS = ("t TEXT", "n NUMERIC", "j JSON", "d DATETIME", "i INTEGER", "b BIGINT", "r REAL", "x")


@pytest.mark.parametrize(
    "value",
    [
        None,
        0,
        -1,
        7,
        2**63 - 1,
        -(2**63) + 1,
        "",
        "it's",
        "''",
        "naïve ✓ 🙂",
        "12",
        "1.50",
        "1e3",
        "[64, 64]",
        '{"a": 1}',
        "2026-12-01 13:52:18.000001",
        "line\nbreak\ttab",
        "NULL",
        "?1",
        "-- not a comment",
    ],
)
def test_a_literal_stores_exactly_what_binding_stores_in_every_affinity(value: Any) -> None:
    text = literal(value)
    assert text is not None
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE TABLE v ({', '.join(_COLUMNS)})")
    conn.execute(f"INSERT INTO v VALUES ({', '.join([text] * len(_COLUMNS))})")
    conn.execute(f"INSERT INTO v VALUES ({', '.join('?' * len(_COLUMNS))})", (value,) * len(_COLUMNS))
    typed = ", ".join(f"typeof({c.split()[0]}), {c.split()[0]}" for c in _COLUMNS)
    as_literal, as_bound = conn.execute(f"SELECT {typed} FROM v ORDER BY rowid").fetchall()
    assert as_literal == as_bound


@pytest.mark.parametrize(
    "value", [2**63, -(2**63), 2**70, True, False, 1.5, float("nan"), b"x", "a\x00b", "\ud800", 10**100]
)
def test_what_a_literal_cannot_say_exactly_stays_bound(value: Any) -> None:
    assert literal(value) is None
    stmt = Statement("v", ["a", "b"], [[templated_rows._Bound(1), value]], 1)
    assert stmt.sql == 'INSERT INTO "v" ("a", "b") VALUES (?, ?)' and stmt.consts == (value,)
    assert stmt.params((7,)) == (7, value)


def test_a_statements_placeholders_take_the_varying_values_wherever_they_are_and_the_bound_constants() -> (
    None
):
    b = templated_rows._Bound
    stmt = Statement("v", ["a", "b", "c"], [[b(1), "x", 1.5], [b(1), b(2), None], [b(3), 2.5, b(2)]], 3)
    assert stmt.sql == 'INSERT INTO "v" ("a", "b", "c") VALUES (?, \'x\', ?), (?, ?, NULL), (?, ?, ?)'
    assert stmt.consts == (1.5, 2.5) and not stmt.in_order
    assert stmt.params((7, "y", 9)) == (7, 1.5, 7, "y", 9, 2.5, "y")
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE v (a, b, c)")
    conn.execute(stmt.sql, stmt.params((7, "y", 9)))
    assert conn.execute("SELECT a, b, c FROM v ORDER BY rowid").fetchall() == [
        (7, "x", 1.5),
        (7, "y", None),
        (9, 2.5, "y"),
    ]
    ordered = Statement("v", ["a", "b", "c"], [[b(1), b(2), 1.5]], 2)
    assert ordered.in_order and ordered.params((1, 2)) == (1, 2, 1.5)
    with pytest.raises(ValueError):
        Statement("v", ["a"], [[b(2)]], 1)
    # More placeholders than every SQLite takes: refused here, so the template keeps the usual path.
    Statement("v", ["a"], [[1.5]] * templated_rows.MAX_PARAMETERS, 0)
    with pytest.raises(ValueError):
        Statement("v", ["a"], [[1.5]] * (templated_rows.MAX_PARAMETERS + 1), 0)


def _typed(db: Path) -> list[Any]:
    """Every launch (by seq) with its argument rows: each column's storage class and value as SQLite holds it,
    but for ids, the run, times, and the kernel row's id."""
    with sqlite3.connect(db) as conn:

        def columns(table: str, skip: set[str]) -> list[str]:
            return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[1] not in skip]

        def typed(names: list[str], row: tuple[Any, ...]) -> dict[str, tuple[str, Any]]:
            return {c: (row[2 * i], row[2 * i + 1]) for i, c in enumerate(names)}

        launch_cols = columns(
            "launches", {"id", "run_id", "kernel_id", "created_at", "started_at", "duration_s"}
        )
        arg_cols = columns("launch_args", {"id", "launch_id"})
        picked = ", ".join(f'typeof("{c}"), "{c}"' for c in launch_cols)
        arg_picked = ", ".join(f'typeof("{c}"), "{c}"' for c in arg_cols)
        out = []
        for launch_id, *row in conn.execute(f'SELECT id, {picked} FROM "launches" ORDER BY seq'):
            args = conn.execute(
                f'SELECT {arg_picked} FROM "launch_args" WHERE launch_id = ? ORDER BY position', (launch_id,)
            ).fetchall()
            out.append((typed(launch_cols, tuple(row)), [typed(arg_cols, a) for a in args]))
        return out


def test_rows_written_from_templates_are_the_usual_rows_storage_class_for_storage_class(
    tmp_path: Path,
) -> None:
    x = torch.arange(40, dtype=torch.float32)
    typed = {}
    for writer in ("thread", "process"):
        tuned_add.cache.clear()
        tuned_add.cache[(40, "torch.float32", "torch.float32")] = tuned_add.configs[0]
        outs = [torch.zeros(40) for _ in range(2)]
        db = tmp_path / f"{writer}.db"
        rec = tilelens.Recording(
            str(db),
            tmp_path / writer,
            backend="compiled",
            snapshots="none",
            runner=StableTritonLike(),
            writer=writer,
        )
        with rec:
            for half in range(2):  # the second half from the template rows the first half left
                for i in range(5):
                    scale_kernel[(3,)](x, outs[i % 2], 40 - i, float(i) / 3, BLOCK=16)
                    tuned_add[(2,)](x, outs[1], 40, 0.5 * i)
                    scale_kernel[(1,)](x[i:], outs[0][i:], 2**40 + i, -1.25e-7, BLOCK=8)
                if half == 0:
                    rec.flush()
        assert rec.write_failure is None and len(rec.launch_ids) == 30
        if writer == "process":
            assert rec._writer.from_templates >= 15
        typed[writer] = _typed(db)
        with sqlite3.connect(db) as conn:
            ids = [r[0] for r in conn.execute('SELECT id FROM "launches" ORDER BY seq')]
            assert ids == list(range(1, 31))  # what SQLite gives launches inserted in seq order
            assert ids == sorted(rec.launch_ids)
            orphans = conn.execute(
                'SELECT count(*) FROM "launch_args" WHERE launch_id NOT IN (SELECT id FROM "launches")'
            ).fetchone()
            assert orphans == (0,)
    assert typed["process"] == typed["thread"]
    # Scalars beyond 32 bits and floats (bound, not written into the SQL text) as the usual path stores them.
    last = typed["process"][-1][1]
    assert (last[2]["value"], last[2]["value_type"]) == (("integer", 2**40 + 4), ("text", "int"))
    assert (last[3]["value"], last[3]["value_type"]) == (("real", -1.25e-7), ("text", "float"))
    assert typed["process"][-3][1][3]["value"] == ("real", 4 / 3)
    assert [a["storage_offset"] for a in last[:2]] == [("integer", 4), ("integer", 4)]


def test_a_batch_numbers_its_launches_after_the_largest_id_whoever_wrote_it(tmp_path: Path) -> None:
    x = torch.arange(40, dtype=torch.float32)
    db = tmp_path / "h.db"
    out = torch.zeros(40)
    for n in (3, 4):  # two recordings into one history: the second run's launches after the first's
        rec = tilelens.Recording(
            str(db), tmp_path / "b", backend="compiled", snapshots="none", runner=StableTritonLike()
        )
        with rec:
            for half in range(2):
                for i in range(n):
                    scale_kernel[(3,)](x, out, 40 - i, 2.0, BLOCK=16)
                if half == 0:
                    rec.flush()
        assert rec.write_failure is None
    with sqlite3.connect(db) as conn:
        rows = conn.execute('SELECT id, run_id, seq FROM "launches" ORDER BY id').fetchall()
    assert [r[0] for r in rows] == list(range(1, 15))
    assert [(r[1] - rows[0][1], r[2]) for r in rows] == [(0, s) for s in range(6)] + [
        (1, s) for s in range(8)
    ]


def test_a_start_time_is_the_text_the_columns_full_processor_makes() -> None:
    dialect = sqlite_dialect()
    full = Launch.__table__.c.started_at.type.dialect_impl(dialect).bind_processor(dialect)
    short = templated_rows.started_processor(dialect)
    for epoch in (0.0, 1.5, 1764597138.000001, 1764597138.999999, 2**31 + 0.25, 4102444800.123456):
        when = dt.datetime.fromtimestamp(epoch, dt.timezone.utc)
        assert short(when) == full(when)
        assert short(when).startswith(when.strftime("%Y-%m-%d %H:%M:%S"))


def test_a_start_time_from_epoch_seconds_is_the_text_the_processor_makes_of_its_datetime() -> None:
    dialect = sqlite_dialect()
    full = Launch.__table__.c.started_at.type.dialect_impl(dialect).bind_processor(dialect)
    text = templated_rows.started_text(templated_rows.started_processor(dialect))
    rng = random.Random(15)
    epochs = [0.0, 0.000001, -0.5, -86400.0000005, 59.9999995, 86399.999999, 951782400.5, 1764597138.0000005]
    epochs += [253402300799.0, 1764597138.9999996, 1764597139.0]
    epochs += [rng.uniform(0, 4.2e9) for _ in range(2000)] + [rng.uniform(0, 1e6) for _ in range(2000)]
    epochs += [1764597138 + k / 7 for k in range(100)]  # within a few seconds: the kept text of a second
    for epoch in epochs:
        assert text(epoch) == full(dt.datetime.fromtimestamp(epoch, dt.timezone.utc)), epoch
    # The text up to the seconds is made once a second: 100 launches within 15 seconds call the processor
    # 15 times (besides the checks when the text maker is made).
    calls = []

    def counted(when: dt.datetime) -> Any:
        calls.append(when)
        return full(when)

    per_second = templated_rows.started_text(counted)
    calls.clear()
    for k in range(100):
        assert per_second(1764597138 + k * 0.15) == full(
            dt.datetime.fromtimestamp(1764597138 + k * 0.15, dt.timezone.utc)
        )
    assert len(calls) == 15
    # A processor that makes anything else keeps its own way: its value, made of the same datetime.
    other = templated_rows.started_text(lambda when: when.isoformat())
    assert other(1.5) == "1970-01-01T00:00:01.500000+00:00"
    same = templated_rows.started_text(None)
    assert same(1.5) == dt.datetime(1970, 1, 1, 0, 0, 1, 500000, dt.timezone.utc)


def test_argument_rows_are_kept_per_values_and_the_values_types() -> None:
    """1, 1.0 and True are equal keys of a dict, but they are different rows: the kept parameters are keyed
    with the values' types, and a kept row takes each launch's own id."""
    b = templated_rows._Bound
    template = object.__new__(templated_rows.RowTemplate)
    columns = ["launch_id", "storage_offset", "storage_group", "storage_bytes", "value"]
    template.args = Statement("launch_args", columns, [[b(1), b(2), b(3), b(4), b(5)]], 5)
    template.arg_processors = (None, None, None, json.dumps)  # the JSON column's processor makes text
    template.slots = ((0, True), (1, False))  # a tensor (offset, pointer, bytes), then a scalar
    template.convert = lambda v: v
    template.scalars, template.tails = {}, {}

    def arg_row(launch_id: int, values: Any) -> tuple[Any, ...]:
        return template.args.params(template.arg_varying(launch_id, values))  # what ``write_templated`` binds

    assert arg_row(5, [0, 4096, 64, 1]) == (5, 0, 0, 64, "1")
    assert arg_row(6, [0, 4096, 64, 1.0]) == (6, 0, 0, 64, "1.0")
    assert arg_row(7, [0, 4096, 64, True]) == (7, 0, 0, 64, "true")
    assert arg_row(8, (0, 4096, 64, 1)) == (8, 0, 0, 64, "1")  # a tuple of the same values: kept
    assert arg_row(9, [8, 4096, 64, 1]) == (9, 8, 0, 64, "1")
    assert len(template.tails) == 4


def test_one_insert_of_many_executions_rows_writes_what_the_executions_one_by_one_write() -> None:
    b = templated_rows._Bound
    one = Statement("v", ["a", "b", "c"], [[b(1), "x", 1.5], [b(2), b(1), None]], 2)
    rows = [(i, f"s{i}") for i in range(37)]
    together, apart = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
    for conn in (together, apart):
        conn.execute("CREATE TABLE v (a, b, c)")
    one.insert_all(together.cursor(), rows)
    for row in rows:
        apart.execute(one.sql, one.params(row))
    written = [
        c.execute("SELECT rowid, a, typeof(b), b, c FROM v ORDER BY rowid").fetchall()
        for c in (together, apart)
    ]
    assert written[0] == written[1] and len(written[0]) == 74
    assert one.most == templated_rows.MAX_TIMES == 16
    assert sorted(one._times) == [1, 4, 16]  # 37 = 2 x 16 + 4 + 1
    assert one.times(4).sql.count("(?, 'x', ?)") == 4
    # A statement of many placeholders puts fewer executions in one INSERT, within SQLite's limit.
    wide = Statement("w", ["a"], [[b(1)]] * 100, 1)
    assert wide.most == 8 and wide.times(8).sql.count("?") <= templated_rows.MAX_PARAMETERS
