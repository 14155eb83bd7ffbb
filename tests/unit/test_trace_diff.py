"""The first differing event of two traces, as ``tilelens diff`` reports it."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tilelens.store.read import diff
from tilelens.store.read.diff import first_event_diff


def _trace(lines: list[int], bases: list[int]) -> pa.Table:
    n = len(lines)
    return pa.table(
        {
            "pid_x": pa.array([i // 2 for i in range(n)], pa.int32()),
            "pid_y": pa.array([0] * n, pa.int32()),
            "pid_z": pa.array([0] * n, pa.int32()),
            "op": pa.array(["load", "store"] * (n // 2) + ["load"] * (n % 2), pa.string()),
            "line": pa.array(lines, pa.int32()),
            "base": pa.array(bases, pa.int64()),
            "mask": pa.array([b"\xff\x0f"] * n, pa.binary()),
            "event": pa.array(range(n), pa.int32()),
        }
    )


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diff, "TRACE_BATCH_ROWS", 2)  # equal batches skipped, the difference in a later one


def test_equal_traces_have_no_difference() -> None:
    assert first_event_diff(_trace([5, 6] * 3, list(range(6))), _trace([5, 6] * 3, list(range(6)))) is None


def test_the_first_field_that_differs_in_the_first_event_that_does() -> None:
    a = _trace([5, 6, 5, 6, 5, 6], [0, 1, 2, 3, 4, 5])
    b = _trace([5, 6, 5, 6, 5, 7], [0, 1, 2, 3, 9, 5])
    d = first_event_diff(a, b)
    assert d is not None
    assert (d.index, d.pid, d.op, d.line, d.field, d.a, d.b) == (4, (2, 0, 0), "load", 5, "base", 4, 9)


def test_a_trace_that_is_a_prefix_of_the_other_differs_at_the_first_extra_event() -> None:
    d = first_event_diff(_trace([5, 6, 5], [0, 1, 2]), _trace([5, 6, 5, 6, 5], [0, 1, 2, 3, 4]))
    assert d is not None
    assert (d.index, d.pid, d.op, d.field, d.a, d.b) == (3, (1, 0, 0), "store", "event", None, 3)
