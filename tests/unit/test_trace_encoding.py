"""Trace encoding reuses a recent table only for columns equal value for value (``encode_trace_reusing``)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from tilelens.store.files import traces
from tilelens.store.files.traces import TRACE_SCHEMA, encode_trace, encode_trace_reusing


def _columns(offsets: list[int], mask: bytes | None = None) -> dict[str, list[Any]]:
    c: dict[str, list[Any]] = {name: [] for name in TRACE_SCHEMA.names}
    for pid, (offs, strides) in enumerate([(None, [1]), (np.array(offsets, dtype=np.int64), None)]):
        row = {
            "pid_x": pid, "pid_y": 0, "pid_z": 0, "event": 0, "op": "load", "arg": 0, "line": 7,
            "elem_bytes": 4, "shape": (4,), "base": 4 * pid, "strides": strides, "offsets": offs,
            "mask": mask, "oob_mask": None, "lanes": 4, "active": 4, "oob": 0, "stray_mask": None,
            "stray": 0, "oob_values": None,
        }  # fmt: skip
        for name in TRACE_SCHEMA.names:
            c[name].append(row[name])
    return c


@pytest.fixture(autouse=True)
def _fresh() -> None:
    traces._ENCODED.clear()


def test_equal_columns_reuse_the_table_and_any_difference_encodes_anew() -> None:
    first = encode_trace_reusing(_columns([3, 1, 2, 0]))
    assert first.equals(encode_trace(_columns([3, 1, 2, 0])))
    assert encode_trace_reusing(copy.deepcopy(_columns([3, 1, 2, 0]))) is first
    for changed in (_columns([3, 1, 2, 9]), _columns([3, 1, 2]), _columns([3, 1, 2, 0], mask=b"\x70")):
        table = encode_trace_reusing(changed)
        assert table is not first and table.equals(encode_trace(changed))
        assert not table.equals(first)


def test_columns_the_caller_changes_later_do_not_change_what_is_reused() -> None:
    cols = _columns([0, 1, 2, 3])
    first = encode_trace_reusing(cols)
    cols["line"][0] = 99  # the kept copy is the columns as they were encoded
    table = encode_trace_reusing(cols)
    assert table is not first and table.column("line").to_pylist() == [99, 7]


def test_replay_comparison_normalizes_a_table_once_and_finds_differences_still() -> None:
    from tilelens.replay import traces as replay_traces

    recorded = encode_trace(_columns([3, 1, 2, 0]))
    same = encode_trace(_columns([3, 1, 2, 0]))
    other = encode_trace(_columns([3, 1, 2, 9]))
    once = replay_traces.normalize(recorded)
    assert replay_traces.normalize(recorded) is once and once.equals(replay_traces._normalize(recorded))
    assert once.schema.field("op").type == "string"
    assert replay_traces.first_difference(recorded, same, {0: "x"}) is None
    diff = replay_traces.first_difference(recorded, other, {0: "x"})
    assert diff is not None and (diff.row, diff.field) == (1, "offsets")
