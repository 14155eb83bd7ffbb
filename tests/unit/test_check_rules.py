"""The rules of ``tilelens check`` on hand-made traces: which accesses conflict, which a lock synchronizes.

Each trace is built event by event (program, operation, argument, line, element offsets), so every expected
finding below is read off the events beside it. The recorded kernels are in tests/end_to_end/test_cli_check.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tilelens.analysis import races
from tilelens.analysis.check import check_trace, logical_index
from tilelens.analysis.events import ATOMIC, LOAD, STORE
from tilelens.analysis.races import Lanes, conflicts
from tilelens.store.files.traces import TRACE_SCHEMA, encode_trace
from tilelens.store.read.results import KernelInfo

KERNEL = KernelInfo(1, "m", "k", "k.py", 1, None, "", "\n".join(f"line {i}" for i in range(1, 40)))


def trace(*events: tuple[int, str, int, int, list[int]]) -> pa.Table:
    """Events (program, op, arg, line, element offsets), in order; each program's events numbered 0, 1..."""
    cols: dict[str, list[Any]] = {name: [] for name in TRACE_SCHEMA.names}
    count: dict[int, int] = {}
    for pid, op, arg, line, offsets in events:
        n = len(offsets)
        values = {
            "pid_x": pid,
            "pid_y": 0,
            "pid_z": 0,
            "event": count.get(pid, 0),
            "op": op,
            "arg": arg,
            "line": line,
            "elem_bytes": 4,
            "shape": [n],
            "base": 0,
            "strides": None,
            "offsets": np.array(offsets, dtype=np.int64),
            "mask": None,
            "oob_mask": None,
            "lanes": n,
            "active": n,
            "oob": 0,
            "stray_mask": None,
            "stray": 0,
            "oob_values": None,
        }
        count[pid] = count.get(pid, 0) + 1
        for name, value in values.items():
            cols[name].append(value)
    return encode_trace(cols)


def check(*events: tuple[int, str, int, int, list[int]]) -> tuple[list[tuple], list[tuple]]:
    """(kind, arg, lines, elements, programs per side) of each finding, and of each synchronized conflict with
    its locks and the lines that took them."""
    findings, synced = check_trace(trace(*events), (4, 1, 1), [], KERNEL)

    def sides(x: Any) -> tuple:
        return tuple(s.line for s in x.sides), tuple(s.programs for s in x.sides)

    return (
        [(f.kind, f.arg, *sides(f), f.elements.first_offsets, f.elements.count) for f in findings],
        [(s.kind, s.arg, *sides(s), s.elements.count, s.locks, s.take_lines) for s in synced],
    )


# -- conflicts, lane by lane --------------------------------------------------------------------------------


def lanes(*rows: tuple[int, int, int, int, int]) -> Lanes:
    """Lanes (element offset, program, kind, lock held or -1, line)."""
    a = np.array(rows, dtype=np.int64).reshape(-1, 5)
    return Lanes(a[:, 0], a[:, 1], a[:, 2].astype(np.int8), a[:, 3], a[:, 4])


def found(lanes: Lanes) -> list[tuple]:
    return sorted(
        (
            c.kind,
            c.lines,
            c.elements.tolist(),
            c.programs[0].tolist(),
            c.programs[1].tolist(),
            c.synchronized,
            c.locks,
        )
        for c in conflicts(0, lanes)
    )


def test_disjoint_elements_and_one_programs_own_accesses_never_conflict() -> None:
    assert found(lanes((0, 0, STORE, -1, 10), (1, 1, STORE, -1, 10))) == []
    assert found(lanes((5, 0, LOAD, -1, 10), (5, 0, STORE, -1, 11), (5, 0, ATOMIC, -1, 12))) == []


def test_elements_only_read_never_conflict() -> None:
    assert found(lanes(*((7, p, LOAD, -1, 10) for p in range(8)))) == []


def test_two_programs_storing_one_element_race() -> None:
    assert found(lanes((3, 0, STORE, -1, 10), (3, 1, STORE, -1, 10), (4, 1, STORE, -1, 10))) == [
        ("write-write", (10, 10), [3], [0, 1], [0, 1], False, ())
    ]


def test_stores_on_two_lines_are_one_finding_not_two() -> None:
    assert found(lanes((3, 0, STORE, -1, 12), (3, 1, STORE, -1, 10))) == [
        ("write-write", (10, 12), [3], [1], [0], False, ())
    ]


def test_a_read_of_an_element_another_program_writes_is_a_hazard() -> None:
    assert found(lanes((5, 0, LOAD, -1, 10), (5, 1, STORE, -1, 11), (6, 1, LOAD, -1, 10))) == [
        ("read-write", (10, 11), [5], [0], [1], False, ())
    ]


def test_plain_accesses_to_an_element_others_update_atomically_are_mixed() -> None:
    mixed = lanes((0, 0, ATOMIC, -1, 12), (0, 1, ATOMIC, -1, 12), (0, 2, LOAD, -1, 13))
    assert found(mixed) == [("mixed-atomic", (13, 12), [0], [2], [0, 1], False, ())]
    assert found(lanes((0, 0, ATOMIC, -1, 12), (0, 1, ATOMIC, -1, 12))) == []  # atomics alone: fine


def test_one_same_lock_synchronizes_and_anything_else_races() -> None:
    same = lanes((2, 0, STORE, 4, 10), (2, 1, STORE, 4, 10))
    assert found(same) == [("write-write", (10, 10), [2], [0, 1], [0, 1], True, (4,))]
    for g0, g1 in ((4, 5), (4, -1), (-1, -1)):
        assert found(lanes((2, 0, STORE, g0, 10), (2, 1, STORE, g1, 10)))[0][5] is False
    # Program 0 stores under two locks, program 1 under one of them: its store under lock 5 races with 1's.
    mixed = lanes((2, 0, STORE, 4, 10), (2, 0, STORE, 5, 11), (2, 1, STORE, 4, 10))
    assert [f[:2] + f[5:6] for f in found(mixed)] == [
        ("write-write", (10, 10), True),
        ("write-write", (10, 11), False),
    ]


def test_elements_taken_in_ranges_give_the_same_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [(e, p, STORE if p % 2 else LOAD, -1, 10 + p % 3) for e in range(0, 40, 3) for p in range(5)]
    expected = found(lanes(*rows))
    assert len(expected) == 7  # reads on lines 10, 12, 11 x stores on 11, 10; stores on 10 x 11
    monkeypatch.setattr(races, "_KEY_LIMIT", 5 * 1 * 3)  # keys of 3 elements at a time
    assert found(lanes(*rows)) == expected


# -- locks --------------------------------------------------------------------------------------------------


def locked(
    pid: int, lock: int, *inside: tuple[int, str, int, int, list[int]], release: str = "atomic_xchg"
) -> list:
    """Program ``pid`` takes the lock element ``lock`` of argument 2 (line 5), does ``inside``, releases it."""
    return [(pid, "atomic_cas", 2, 5, [lock]), *inside, (pid, release, 2, 9, [lock])]


def accumulate(pid: int) -> list[tuple[int, str, int, int, list[int]]]:
    return [(pid, "load", 1, 7, [0, 1]), (pid, "store", 1, 8, [0, 1])]


def test_a_lock_taken_and_released_around_the_accesses_synchronizes_them() -> None:
    events = [*locked(0, 0, *accumulate(0)), *locked(1, 0, *accumulate(1))]
    assert check(*events) == (
        [],
        [
            ("write-write", 1, (8, 8), (2, 2), 2, ["#2+0"], [5]),
            ("read-write", 1, (7, 8), (2, 2), 2, ["#2+0"], [5]),
        ],
    )


def test_a_plain_store_releases_a_lock_too() -> None:
    events = [*locked(0, 0, *accumulate(0), release="store"), *locked(1, 0, *accumulate(1), release="store")]
    findings, synced = check(*events)
    assert findings == [] and len(synced) == 2  # the release store itself is the lock's, not a mixed access


def test_accesses_outside_the_lock_or_under_different_locks_race() -> None:
    after = [*locked(0, 0), *accumulate(0), *locked(1, 0), *accumulate(1)]
    assert [f[:3] for f in check(*after)[0]] == [("write-write", 1, (8, 8)), ("read-write", 1, (7, 8))]
    own = [*locked(0, 0, *accumulate(0)), *locked(1, 1, *accumulate(1))]
    assert [f[:3] for f in check(*own)[0]] == [("write-write", 1, (8, 8)), ("read-write", 1, (7, 8))]


def test_a_take_never_released_is_no_lock() -> None:
    """An xchg setting a flag (the layer-norm tutorial's ``Count``) guards nothing after it."""
    events = [(0, "atomic_xchg", 2, 5, [3]), *accumulate(0), (1, "atomic_xchg", 2, 5, [3]), *accumulate(1)]
    assert [f[:3] for f in check(*events)[0]] == [("write-write", 1, (8, 8)), ("read-write", 1, (7, 8))]


def test_nested_locks_guard_by_the_innermost() -> None:
    def inner(pid: int) -> list[tuple[int, str, int, int, list[int]]]:
        return [(pid, "atomic_cas", 2, 6, [1]), *accumulate(pid), (pid, "atomic_xchg", 2, 9, [1])]

    both = locked(0, 0, *inner(0))
    assert check(*both, *locked(1, 0, *inner(1)))[0] == []
    # Program 1 holds only the outer lock: the innermost locks differ, so the rule reports a race (a limit).
    assert [f[:3] for f in check(*both, *locked(1, 0, *accumulate(1)))[0]] == [
        ("write-write", 1, (8, 8)),
        ("read-write", 1, (7, 8)),
    ]


# -- element names ------------------------------------------------------------------------------------------


def test_logical_indices_of_offsets() -> None:
    assert logical_index(13, [4, 6], [6, 1]) == [2, 1]
    assert logical_index(13, [6, 4], [1, 6]) == [1, 2]  # a transposed view
    assert logical_index(0, [], []) == []
    assert logical_index(24, [4, 6], [6, 1]) is None  # past the view
    assert logical_index(3, [2, 2], [4, 1]) is None  # in the gap of a strided view
    assert logical_index(5, None, None) is None
