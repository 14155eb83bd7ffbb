"""The pieces of ``tilelens coverage`` that need no history: line capture, statements and masks from source,
per-line memory sums, and the folded line ranges of the report."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from tilelens.analysis.coverage import kernel_coverage, line_memory, parse_statements
from tilelens.core.engine.lines import LineCapture
from tilelens.reporters.coverage import line_ranges
from tilelens.store.read.coverage_rows import CoverageLaunch
from tilelens.store.read.results import KernelInfo


def sample(a: int) -> int:
    b = a + 1
    if b > 5:
        b = 0
    for i in range(2):
        b += i
    return b


FIRST = sample.__code__.co_firstlineno
# Under 3.10/3.11 a tracer already set (a debugger, pytest --cov) keeps capture off, as it should.
TRACED = sys.version_info < (3, 12) and sys.gettrace() is not None
needs_no_tracer = pytest.mark.skipif(TRACED, reason="another tracer is active")


def helper(a: int) -> int:
    return sample(a) * 2


@needs_no_tracer
def test_capture_sees_the_function_lines_run_through_a_caller_and_nothing_else() -> None:
    capture = LineCapture()
    with capture.watching(sample.__code__):
        assert helper(1) == 6  # b = 2, not > 5: the `b = 0` line never runs
    assert capture.result() == [FIRST + n for n in (1, 2, 4, 5, 6)]
    with capture.watching(sample.__code__):
        assert helper(10) == 2
    assert capture.result() == [FIRST + n for n in range(1, 7)]
    capture.discard()
    assert capture.result() == []


@needs_no_tracer
def test_exceptions_pass_through_and_capture_stops() -> None:
    capture = LineCapture()

    def boom() -> None:
        raise ValueError("kernel failed")

    with pytest.raises(ValueError, match="kernel failed"), capture.watching(boom.__code__):
        boom()
    assert capture.failure is None and capture.result() == [boom.__code__.co_firstlineno + 1]
    assert sys.gettrace() is None or sys.version_info >= (3, 12)
    if sys.version_info >= (3, 12):
        assert all(sys.monitoring.get_tool(t) is None for t in (3, 4))  # type: ignore[attr-defined]


@pytest.mark.skipif(sys.version_info >= (3, 12) or TRACED, reason="3.12+ uses sys.monitoring, not settrace")
def test_another_tracer_wins_and_the_launch_says_why() -> None:
    seen: list[str] = []

    def other(frame: object, event: str, arg: object) -> None:
        seen.append(event)

    capture = LineCapture()
    previous = sys.gettrace()
    sys.settrace(other)
    try:
        with capture.watching(sample.__code__):
            sample(1)
        assert sys.gettrace() is other  # left in place
    finally:
        sys.settrace(previous)
    assert capture.result() is None
    assert (
        capture.failure == "line capture unavailable: another tracer (a debugger or coverage tool) is active"
    )
    assert "call" in seen


SOURCE = '''def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Docstring: not a statement."""
    offs = tl.arange(0, BLOCK)
    if BLOCK > 4:
        x = tl.load(x_ptr + offs,
                    mask=offs < n)
    else:
        x = tl.load(x_ptr + offs, offs < n, 0.0)
    for i in range(3):
        tl.store(out_ptr + offs, x)
    tl.atomic_add(out_ptr, 1.0, mask=None)
    tl.atomic_add(out_ptr + offs, x, offs < n)
    tl.load(x_ptr, boundary_check=(0,))
'''


def test_statements_and_masked_accesses_from_source() -> None:
    statements, masked = parse_statements(SOURCE, 100)  # the def at line 100
    assert statements == {
        102: [102],
        103: [103],  # the `if` header; its body's statements are their own
        104: [104, 105],  # a call over two lines
        107: [107],  # `else:` (106) belongs to no statement
        108: [108],
        109: [109],
        110: [110],
        111: [111],
        112: [112],
    }
    # mask= given, a positional mask, an atomic's positional mask, boundary_check; not mask=None, not unmasked.
    assert masked == {104, 107, 111, 112}


def test_a_source_that_does_not_parse_has_no_statements() -> None:
    assert parse_statements("def broken(:\n", 1) == ({}, set())


def test_line_memory_sums_events_per_line() -> None:
    line = np.array([5, 5, 5, 7, 7])
    lanes = np.array([16, 16, 16, 8, 8])
    active = np.array([16, 4, 0, 8, 8])
    got = line_memory(line, lanes, active)
    assert sorted(got) == [5, 7]
    five, seven = got[5], got[7]
    assert (five.events, five.lanes, five.active, five.partial, five.full, five.empty) == (3, 48, 20, 1, 1, 1)
    assert (seven.events, seven.lanes, seven.active, seven.partial, seven.full, seven.empty) == (
        2,
        16,
        16,
        0,
        2,
        0,
    )
    assert line_memory(np.array([], dtype=np.int64), np.array([]), np.array([])) == {}


def test_line_ranges_fold_runs() -> None:
    assert line_ranges([12, 3, 5, 6, 7]) == "3, 5-7, 12"
    assert line_ranges([4]) == "4"
    assert line_ranges([]) == ""


KERNEL = """def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if n > 4:
        tl.store(x_ptr + offs, x + 1, mask=offs < n)
"""


def kernel_info() -> KernelInfo:
    return KernelInfo(3, "m", "k", "m.py", 10, None, "cd" * 32, KERNEL)


def events(line: int, lanes: int, actives: list[int]) -> dict[int, Any]:
    n = len(actives)
    return line_memory(np.full(n, line), np.full(n, lanes), np.array(actives))


def test_a_compiled_launch_adds_its_memory_lines_and_a_note() -> None:
    """Launch 1 (interpreted, captured) ran lines 11-13 with n <= 4; launch 2 (compiled, traced later) stored at
    line 14: together every statement ran. Launch 1's load was whole blocks in or out (full or empty events),
    launch 2's store never had a lane on (every event empty)."""
    launches = [
        CoverageLaunch(1, 3, "t::a", "interpreter", "sha1", (11, 12, 13)),
        CoverageLaunch(2, 3, None, "compiled", "sha2", None),
    ]
    memory = {1: events(12, 8, [8, 0]), 2: events(14, 8, [0, 0, 0])}
    k = kernel_coverage(kernel_info(), launches, memory)
    assert (k.statements, k.executed_statements, k.missing, k.percent) == (4, 4, [], 100.0)
    assert (k.launches, k.line_launches, k.tests) == (2, 1, 1)
    rows = {r.line: r for r in k.lines}
    assert [(line, rows[line].launches, rows[line].tests) for line in (11, 12, 13, 14)] == [
        (11, 1, 1),
        (12, 1, 1),
        (13, 1, 1),
        (14, 1, 0),
    ]
    assert [(g.line, g.full_events, g.empty_events, g.message) for g in k.boundary] == [
        (12, 1, 1, "the mask at line 12 was always full or empty: no launch exercised a partial tail"),
        (14, 0, 3, "the mask at line 14 was never true: no launch exercised a partial tail"),
    ]
    assert k.notes == ["1 of 2 launches have no line data (1 compiled): only their memory lines count"]


def test_without_any_line_data_missing_is_unknown() -> None:
    launch = CoverageLaunch(1, 3, None, "compiled", None, None)  # no trace either
    k = kernel_coverage(kernel_info(), [launch], {})
    assert (k.missing, k.executed_statements, k.percent) == (None, None, None)
    assert {r.line: r.status for r in k.lines} == {
        10: None,
        11: "unknown",
        12: "unknown",
        13: "unknown",
        14: "unknown",
    }
