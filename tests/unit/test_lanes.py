"""The vectorised lane decoding agrees lane for lane with the row-by-row decoders of the recorder."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from tilelens.core.engine.access import AccessCollector
from tilelens.core.kernel.spans import ArgSpan, SpanTable
from tilelens.store.files import lanes
from tilelens.store.files.traces import lane_mask, lane_offsets, lane_oob

ELEM = 4
# Two 100-element float arguments with a gap between them; addresses past either are out of bounds.
SPANS = SpanTable([ArgSpan(0, 1000, 1000 + 100 * ELEM, ELEM), ArgSpan(1, 4000, 4000 + 100 * ELEM, ELEM)])


@st.composite
def events(draw: st.DrawFn) -> list[tuple]:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        shape = tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=3)))
        n = int(np.prod(shape)) if shape else 1
        base = draw(st.sampled_from([1000, 4000, 4000 + 90 * ELEM]))
        if draw(st.booleans()):  # affine: a strided block
            strides = [draw(st.integers(-3, 7)) * ELEM for _ in shape]
            addrs = np.full(shape, base, dtype=np.int64)
            for axis, s in enumerate(strides):
                index = np.arange(shape[axis]).reshape([-1 if a == axis else 1 for a in range(len(shape))])
                addrs = addrs + index * s
        else:  # a gather: irregular offsets, some past the argument
            addrs = base + ELEM * np.array(draw(st.lists(st.integers(-5, 120), min_size=n, max_size=n)))
            addrs = addrs.reshape(shape)
        mask = None
        if draw(st.booleans()):
            mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool).reshape(shape)
        op = draw(st.sampled_from(["load", "store", "atomic_add"]))
        pid = (draw(st.integers(0, 2)), 0, 0)
        out.append((op, np.asarray(addrs, dtype=np.int64).astype(np.uint64), mask, pid))
    return out


def trace_of(evs: list[tuple]) -> pa.Table:
    collector = AccessCollector(SPANS)
    for op, addrs, mask, pid in evs:
        collector.record(op, addrs, mask, ELEM, pid)
    return collector.finish()


def expected(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = table.to_pylist()
    return (
        np.concatenate([lane_offsets(r).ravel() for r in rows]),
        np.concatenate([lane_mask(r).ravel() for r in rows]),
        np.concatenate([lane_oob(r).ravel() for r in rows]),
    )


def decoded(table: pa.Table, max_lanes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    chunks = list(lanes.LaneDecoder(table).chunks(max_lanes))
    return tuple(np.concatenate([getattr(c, name) for c in chunks]) for name in ("offset", "active", "oob"))


def parquet_round_trip(table: pa.Table) -> pa.Table:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return pq.ParquetFile(pa.BufferReader(sink.getvalue())).read()


@settings(max_examples=60, deadline=None)
@given(events(), st.integers(1, 40))
def test_decoder_matches_the_row_decoders(evs: list[tuple], max_lanes: int) -> None:
    table = trace_of(evs)
    want = expected(table)
    for candidate in (
        table,
        parquet_round_trip(table),
        pa.concat_tables([table.slice(0, 1), table.slice(1)]),
    ):
        got = decoded(candidate, max_lanes)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@settings(max_examples=40, deadline=None)
@given(events())
def test_distinct_elements_and_line_counts(evs: list[tuple]) -> None:
    table = trace_of(evs)
    rows = table.to_pylist()
    distinct: dict[int, set[int]] = {}
    lines: dict[int, dict[str, int]] = {}
    for r in rows:
        keep = lane_mask(r) & ~lane_oob(r)
        if r["arg"] >= 0:
            distinct.setdefault(r["arg"], set()).update(int(v) for v in lane_offsets(r)[keep])
        kind = lanes.op_kind(r["op"])
        counts = lines.setdefault(r["line"], {"load": 0, "store": 0, "atomic": 0, "oob": 0})
        counts[kind] += r["active"]
        counts["oob"] += int(lane_oob(r).sum())
    assert lanes.distinct_elements(table, max_lanes=7) == {a: len(v) for a, v in distinct.items() if v}
    got = lanes.line_counts(table)
    assert {line: (c.load_lanes, c.store_lanes, c.atomic_lanes, c.oob_lanes) for line, c in got.items()} == {
        line: (c["load"], c["store"], c["atomic"], c["oob"]) for line, c in lines.items()
    }


def test_lane_table_and_oob_rows() -> None:
    evs = [
        ("load", np.arange(1000, 1000 + 8 * ELEM, ELEM, dtype=np.uint64), None, (0, 0, 0)),
        ("store", np.arange(4000 + 96 * ELEM, 4000 + 104 * ELEM, ELEM, dtype=np.uint64), None, (1, 0, 0)),
        ("load", np.array([10, 20], dtype=np.uint64), None, (1, 0, 0)),  # near no argument
    ]
    table = trace_of(evs)
    flat = pa.Table.from_batches(list(lanes.lane_table(table, 7, {0: "x", 1: "y"}, max_lanes=3)))
    assert flat.schema == lanes.LANE_SCHEMA
    d = flat.to_pydict()
    # Lanes below every argument are attributed to the nearest one, and flagged out of bounds.
    assert d["arg_name"] == ["x"] * 8 + ["y"] * 8 + ["x", "x"] and d["oob"][16:] == [True, True]
    assert d["op"] == ["load"] * 8 + ["store"] * 8 + ["load"] * 2
    assert d["lane"][:8] == list(range(8)) and set(d["launch_id"]) == {7}
    assert d["offset"][8:16] == list(range(96, 104)) and d["oob"][8:16] == [False] * 4 + [True] * 4
    found = lanes.oob_rows(table, 1)
    assert found.total == 2
    (row,) = found.rows
    assert (row["pid_x"], row["op"], row["oob"], row["oob_offsets"]) == (1, "store", 4, (100, 103))


def test_events_of_no_argument_have_no_name() -> None:
    collector = AccessCollector(SpanTable([]))
    collector.record("load", np.array([8, 12], dtype=np.uint64), None, ELEM, (0, 0, 0))
    table = collector.finish()
    (batch,) = lanes.lane_table(table, 1, {0: "x"})
    assert batch.column("arg").to_pylist() == [-1, -1]
    assert batch.column("arg_name").to_pylist() == [None, None]
    assert lanes.distinct_elements(table) == {}


@settings(max_examples=40, deadline=None)
@given(events(), st.integers(1, 40))
def test_chosen_rows_decode_alone_and_their_spans_bound_every_lane(evs: list[tuple], max_lanes: int) -> None:
    table = trace_of(evs)
    want = [lane_offsets(r).ravel() for r in table.to_pylist()][::-1]
    decoder = lanes.LaneDecoder(table)
    rows = np.arange(table.num_rows, dtype=np.int64)[::-1].copy()  # any order, last row first
    got = np.concatenate([c.offset for c in decoder.chunks_of(rows, max_lanes)])
    np.testing.assert_array_equal(got, np.concatenate(want))
    low, high = decoder.spans(rows)
    assert (low.tolist(), high.tolist()) == ([int(w.min()) for w in want], [int(w.max()) for w in want])
