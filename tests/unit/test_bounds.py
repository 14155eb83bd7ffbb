"""The bounds guard's pieces: storage intervals, fault-safe stray reads, recorded reads fed to a replay."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tilelens.core.engine import bounds
from tilelens.core.engine.bounds import RecordedReads
from tilelens.core.kernel.spans import StorageTable
from tilelens.store.files.traces import TRACE_SCHEMA


def addrs(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def test_storage_intervals_merge_and_classify_whole_lanes() -> None:
    table = StorageTable([(1000, 1100), (1050, 1200), (5000, 5040), (7000, 7000)])
    assert (table.starts, table.ends) == ([1000, 5000], [1200, 5040])  # overlap merged, empty dropped
    lanes = addrs(996, 1000, 1196, 1197, 1200, 4999, 5000, 5036, 5037, 2**64 - 2)
    # A lane is stray unless all its 4 bytes lie in one storage; a wild address must not wrap around.
    expected = [True, False, False, True, True, True, False, False, True, True]
    assert table.outside(lanes, 4).tolist() == expected


def test_stray_is_none_on_the_fast_path_and_ignores_inactive_lanes() -> None:
    table = StorageTable([(1000, 2000)])
    assert table.stray(addrs(1000, 1004, 1996), None, 4) is None
    block = addrs(1992, 1996, 2000, 2004)
    assert table.stray(block, np.array([True, True, False, False]), 4) is None
    stray = table.stray(block, np.array([True, False, True, False]), 4)
    assert stray is not None and stray.tolist() == [False, False, True, False]
    square = table.stray(block.reshape(2, 2), np.array([True, True]), 4)  # a row mask, broadcast
    assert square is not None and square.tolist() == [[False, False], [True, True]]
    assert StorageTable([]).stray(addrs(8), None, 4).tolist() == [True]


def test_distance_to_the_nearest_storage() -> None:
    table = StorageTable([(1000, 2000), (10_000, 10_100)])
    got = table.distance(addrs(0, 999, 1500, 2000, 2100, 9_999, 10_150)).tolist()
    assert got == [1000.0, 1.0, 0.0, 0.0, 100.0, 1.0, 50.0]


def test_stray_reads_read_nearby_memory_and_never_fault() -> None:
    arena = np.arange(64, dtype=np.float32) + 0.5
    base = arena.ctypes.data
    table = StorageTable([(base + 16 * 4, base + 32 * 4)])  # the "argument" owns elements 16..31
    lanes = addrs(base + 4 * 40, base + 4 * 3, 8, base + 4 * 20)
    stray = np.array([True, True, True, False])
    data = np.full(4, -1.0, dtype=np.float32)
    out = bounds.read_stray(data, lanes, stray, 4, table)
    # Elements 40 and 3 of the arena lie within reach: their bytes; address 8 is far and unmapped: 0.
    assert out.tolist() == [40.5, 3.5, 0.0, -1.0] and data.tolist() == [-1.0] * 4
    assert bounds._memory.read(8, 4) is None


def test_zero_lanes_and_scratch_pointers() -> None:
    data = np.arange(4, dtype=np.int32)
    assert bounds.zero_lanes(data, np.array([False, True, True, False])).tolist() == [0, 0, 0, 3]
    ptrs = addrs(100, 200, 300)
    safe, scratch = bounds.scratch_pointers(ptrs, np.array([True, False, True]), 4)
    assert safe[1] == 200 and scratch.size == 16
    assert [int(safe[0]) - scratch.ctypes.data, int(safe[2]) - scratch.ctypes.data] == [0, 8]


def _trace_row(**values: object) -> dict:
    row = {name: None for name in TRACE_SCHEMA.names}
    row.update(pid_x=0, pid_y=0, pid_z=0, event=0, op="load", arg=0, line=1, elem_bytes=4, shape=[4], base=0)
    row.update(strides=[1], lanes=4, active=4, oob=0, stray=0)
    row.update(values)
    return row


def test_recorded_reads_feed_the_out_of_bounds_lanes_of_the_same_event() -> None:
    values = np.array([7.5, -2.0], dtype=np.float32).tobytes()
    rows = [
        _trace_row(event=0),
        _trace_row(event=1, pid_x=3, oob=2, oob_mask=np.packbits([0, 1, 0, 1]).tobytes(), oob_values=values),
    ]
    reads = RecordedReads.from_trace(pa.Table.from_pylist(rows, schema=TRACE_SCHEMA))
    assert reads is not None and len(reads) == 1
    data = np.zeros(4, dtype=np.float32)
    assert reads.apply((3, 0, 0), 1, data).tolist() == [0.0, 7.5, 0.0, -2.0]
    assert data.tolist() == [0.0] * 4  # fed into a copy
    assert reads.apply((3, 0, 0), 0, data) is data  # another event
    assert reads.apply((3, 0, 0), 1, np.zeros(8, dtype=np.float32)).tolist() == [0.0] * 8  # another shape
    assert RecordedReads.from_trace(pa.Table.from_pylist(rows[:1], schema=TRACE_SCHEMA)) is None
    old = pa.Table.from_pylist(rows).drop_columns(["oob_values"])  # recorded before values were kept
    assert RecordedReads.from_trace(old) is None


def test_policy_resolution() -> None:
    assert bounds.resolve_policy(None) == "record" and bounds.resolve_policy("raise") == "raise"
    try:
        bounds.resolve_policy("warn")
    except ValueError as exc:
        assert "on_oob must be one of record, raise, not 'warn'" in str(exc)
    else:
        raise AssertionError("an unknown policy was accepted")


def test_out_of_bounds_error_is_a_runtime_error_of_the_tilelens_family() -> None:
    import tilelens
    import tilelens.api
    from tilelens import errors
    from tilelens.commands import record

    cls = errors.OutOfBoundsError
    assert tilelens.OutOfBoundsError is tilelens.api.OutOfBoundsError is bounds.OutOfBoundsError is cls
    assert issubclass(cls, errors.TileLensError) and issubclass(cls, RuntimeError)
    assert cls.exit_code == record.EXIT_OOB == 3
    try:
        bounds.resolve_policy("ignore")
    except errors.UsageError as exc:
        assert str(exc) == "on_oob must be one of record, raise, not 'ignore'"
    else:
        raise AssertionError("an unknown policy was accepted")
