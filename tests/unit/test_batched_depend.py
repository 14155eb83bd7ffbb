"""The batched engine's cross-program dependence check (tilelens.core.engine.batched.depend), on synthetic entries."""

from __future__ import annotations

import numpy as np

from tilelens.core.engine.access import LOAD, STORE
from tilelens.core.engine.batched.depend import conflict


def entry(op: str, addrs: list[list[int]], mask: list[list[bool]] | None = None, eb: int = 4, stray=None):
    a = np.array(addrs, dtype=np.uint64)
    m = None if mask is None else np.array(mask, dtype=bool)
    s = None if stray is None else np.array(stray, dtype=bool)
    return (op, a, m, eb, 1, None, s)


def test_disjoint_programs_never_conflict() -> None:
    assert not conflict([entry(LOAD, [[0, 4], [8, 12]]), entry(STORE, [[0, 4], [8, 12]])])


def test_loads_alone_never_conflict() -> None:
    assert not conflict([entry(LOAD, [[0, 4], [0, 4]]), entry(LOAD, [[0, 4], [4, 8]])])


def test_a_program_reading_what_another_wrote_conflicts() -> None:
    assert conflict([entry(STORE, [[0, 4], [8, 12]]), entry(LOAD, [[100, 104], [4, 104]])])
    # ... in either order (the stock order would have the writer finish first, or start last)
    assert conflict([entry(LOAD, [[8, 100], [100, 104]]), entry(STORE, [[0, 4], [8, 12]])])


def test_touches_within_one_statement_follow_the_stock_order() -> None:
    # Every program adds to the same address in one atomic: the C++ lanes run program-major, as the stock loop.
    assert not conflict([entry("atomic_add", [[0], [0], [0]])])
    assert not conflict([entry(STORE, [[0, 4], [4, 8]])])
    # The same atomic in two statements (a loop): program 1's first add would come after program 0's second.
    assert conflict([entry("atomic_add", [[0], [0]]), entry("atomic_add", [[0], [0]])])


def test_only_lanes_that_reach_memory_count() -> None:
    masked = entry(STORE, [[0, 4], [8, 12]], mask=[[True, True], [False, True]])
    assert not conflict([masked, entry(LOAD, [[100, 104], [0, 104]], mask=[[True, True], [False, True]])])
    assert conflict([masked, entry(LOAD, [[100, 104], [0, 104]])])
    stray = entry(STORE, [[0, 4], [8, 12]], stray=[[False, False], [True, False]])
    assert not conflict([stray, entry(LOAD, [[100, 104], [8, 104]])])


def test_overlapping_bytes_of_different_element_sizes_meet() -> None:
    # A 4-byte store at 0 and a 1-byte load of its byte 2 by another program.
    assert conflict([entry(STORE, [[0], [64]], eb=4), entry(LOAD, [[200], [2]], eb=1)])
    assert not conflict([entry(STORE, [[0], [64]], eb=4), entry(LOAD, [[200], [4]], eb=1)])
