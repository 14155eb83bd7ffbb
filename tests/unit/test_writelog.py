"""The write log: old bytes of every written lane, noted before the write, put back on rollback."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from tilelens.core.engine.writelog import WriteLog
from tilelens.core.interpreted.launch import LaunchMeta, run_interpreted
from tilelens.core.kernel.arguments import kernel_params
from tilelens.core.kernel.identity import kernel_identity
from tilelens.core.kernel.spans import StorageTable
from tilelens.core.patches import make_interpreted
from tilelens.errors import StateError


def test_rollback_restores_the_bytes_before_the_first_write() -> None:
    arena = np.arange(16, dtype=np.int32)
    base = arena.ctypes.data
    table = StorageTable([(base, base + arena.nbytes)])
    log = WriteLog()
    lanes = np.array([base + 4 * i for i in (1, 2, 3, 2)], dtype=np.uint64)  # lane 2 twice in one write
    log.note(table, lanes, np.array([True, True, False, True]), 4)
    arena[[1, 2]] = -7
    log.note(table, lanes[:2], None, 4)
    arena[[1, 2]] = -9
    assert [e.addrs.size for e in log.entries()] == [3, 2] and log.bytes == 20
    assert [e.old.view(np.int32).ravel().tolist() for e in log.entries()] == [[1, 2, 2], [-7, -7]]
    log.rollback()
    assert arena.tolist() == list(range(16)) and len(log) == 0


def test_evenly_spaced_lanes_are_gathered_as_the_lane_by_lane_path_gathers_them() -> None:
    arena = np.arange(64, dtype=np.int32)
    other = np.arange(100, 164, dtype=np.int32)
    base, base2 = arena.ctypes.data, other.ctypes.data
    table = StorageTable([(base, base + arena.nbytes), (base2, base2 + other.nbytes)])
    runs = [
        np.arange(base, base + 4 * 64, 4, dtype=np.uint64),  # contiguous: the strided copy
        np.arange(base + 8, base + 4 * 60, 12, dtype=np.uint64),  # strided
        np.full(9, base + 20, dtype=np.uint64),  # one address nine times (step 0)
        np.arange(base + 2, base + 2 + 2 * 16, 2, dtype=np.uint64),  # 2-byte lanes at odd offsets
        np.concatenate([np.arange(base + 4 * 56, base + 4 * 64, 4), np.arange(base2, base2 + 16, 4)]).astype(
            np.uint64
        ),  # two storages: lane by lane
    ]
    for lanes in runs:
        eb = 2 if int(lanes[0]) % 4 else 4
        log = WriteLog()
        log.note(table, lanes, None, eb)
        (entry,) = log.entries()
        assert entry.addrs.tolist() == lanes.tolist()
        assert entry.old.tobytes() == log._gather(table, lanes, eb).tobytes()
    log = WriteLog()
    log.note(table, runs[1], None, 4)
    arena[:] = -1
    log.rollback()
    assert arena[2:60:3].tolist() == list(range(2, 60, 3))


def test_a_lane_outside_every_storage_is_refused_and_unknown_storage_marks_the_log_incomplete() -> None:
    arena = np.zeros(4, dtype=np.int32)
    table = StorageTable([(arena.ctypes.data, arena.ctypes.data + 16)])
    log = WriteLog()
    with pytest.raises(ValueError, match="outside every argument storage"):
        log.note(table, np.array([arena.ctypes.data + 14], dtype=np.uint64), None, 4)
    log.note(None, np.array([8], dtype=np.uint64), None, 4)
    assert not log.complete
    with pytest.raises(StateError):
        log.rollback()


@triton.jit
def _scribble(x_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x * 2, mask=offs < n)
    tl.store(x_ptr + offs, x * 3 + 1)  # no mask: the tail lanes run past the end of x (stray, never written)
    tl.atomic_add(acc_ptr + pid % 2, tl.sum(x, axis=0))


@pytest.mark.parametrize(("engine", "entries"), [("program", 9), ("batched", 3)])
def test_an_interpreted_launch_rolls_back_to_its_arguments_exact_bytes(
    engine: str, entries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILELENS_ENGINE", engine)
    x = torch.arange(37, dtype=torch.float32) / 3
    acc = torch.tensor([0.25, -1.5])
    before = (x.clone(), acc.clone())
    log = WriteLog()
    pyfn = _scribble.fn
    _, record, error = run_interpreted(
        make_interpreted(pyfn),
        kernel_identity(_scribble),
        kernel_params(pyfn),
        [],
        (x, acc, 37),
        (3,),
        {"BLOCK": 16},
        LaunchMeta(),
        snapshots=False,
        writes=log,
    )
    assert error is None and record.summary.dropped_lanes == 11
    assert torch.equal(x[:5], before[0][:5] * 3 + 1) and not torch.equal(acc, before[1])
    # Two stores in each of 3 programs plus 3 atomics (per program: 9 entries; batched: one per statement for
    # the 3 programs); the unmasked store's 11 stray lanes are never noted.
    assert record.config["engine"]["mode"] == engine
    assert len(log) == entries and sum(e.addrs.size for e in log.entries()) == 37 + 37 + 3
    log.rollback()
    assert x.view(torch.int32).tolist() == before[0].view(torch.int32).tolist()
    assert acc.view(torch.int32).tolist() == before[1].view(torch.int32).tolist()


def test_evenly_spaced_lanes_are_kept_as_first_address_and_step() -> None:
    arena = np.arange(64, dtype=np.int32)
    base = arena.ctypes.data
    table = StorageTable([(base, base + arena.nbytes)])
    log = WriteLog()
    strided = np.array([base + 8 * i for i in range(16)], dtype=np.uint64)  # every other element
    gather = np.array([base + 4 * i for i in (40, 3, 41, 7, 50, 51, 52, 53)], dtype=np.uint64)
    log.note(table, strided, None, 4)
    log.note(table, gather, None, 4)
    first, second = log.entries()
    assert first.lanes == (base, 8) and np.array_equal(first.addrs, strided)  # no per-lane addresses held
    assert isinstance(second.lanes, np.ndarray) and np.array_equal(second.addrs, gather)
    assert first.old.view(np.int32).ravel().tolist() == list(range(0, 32, 2))
    arena[0:32:2] = -1
    arena[[40, 3, 41, 7, 50, 51, 52, 53]] = -2
    log.rollback()
    assert arena.tolist() == list(range(64))


def _arena_log(*arrays: np.ndarray) -> StorageTable:
    return StorageTable([(a.ctypes.data, a.ctypes.data + a.nbytes) for a in arrays])


@pytest.mark.parametrize(
    ("route", "lanes_of", "width"),
    [
        ("window", lambda b: [b + 4 * i for i in range(40)], 4),  # contiguous
        ("window", lambda b: [b + 12 * i for i in range(20)], 4),  # strided
        ("window", lambda b: [b + 16] * 12, 4),  # one address repeated
        ("window", lambda b: [b + 2 * i for i in range(30)], 4),  # overlapping lanes
        ("typed", lambda b: [b + 4 * i for i in (9, 2, 63, 2, 40, 41, 7, 0, 33)], 4),
        ("typed", lambda b: [b + 8 * i for i in (5, 1, 30, 2, 17, 9, 3, 11)], 8),
        ("typed", lambda b: [b + 2 * i for i in (100, 3, 7, 64, 1, 90, 91, 5)], 2),
        ("typed", lambda b: [b + i for i in (200, 3, 7, 64, 1, 90, 91, 5)], 1),
        ("bytes", lambda b: [b + 4 * i + 1 for i in (9, 2, 50, 4, 40, 41, 7, 0)], 4),  # misaligned
        ("bytes", lambda b: [b + 3 * i for i in (9, 2, 50, 4, 40, 41, 7, 0)], 3),  # no integer of that width
    ],
)
def test_rollback_puts_back_exact_bytes_whatever_route_the_lanes_take(
    route: str, lanes_of, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes: list[str] = []
    for method, label in (("_window", "window"), ("_typed", "typed"), ("_lanes", "bytes")):
        real = getattr(WriteLog, method)

        def spy(self, *a, _real=real, _label=label):  # type: ignore[no-untyped-def]
            out = _real(self, *a)
            if out is not None:
                routes.append(_label)
            return out

        monkeypatch.setattr(WriteLog, method, spy)
    rng = np.random.default_rng(7)
    arena = rng.integers(0, 256, size=256, dtype=np.uint8)
    pristine = arena.copy()
    base = arena.ctypes.data
    table = _arena_log(arena)
    log = WriteLog()
    addrs = np.array(lanes_of(base), dtype=np.uint64)
    log.note(table, addrs, None, width)
    (entry,) = log.entries()
    expected = np.stack([pristine[int(a) - base : int(a) - base + width] for a in addrs])
    assert np.array_equal(entry.old, expected) and entry.old.shape == (addrs.size, width)
    for a in addrs:  # the write, then a second one over it: both undone
        arena[int(a) - base : int(a) - base + width] = 0xEE
    log.note(table, addrs, None, width)
    assert (list(log.entries())[1].old == 0xEE).all()
    for a in addrs:
        arena[int(a) - base : int(a) - base + width] = 0x11
    log.rollback()
    assert arena.tobytes() == pristine.tobytes()
    assert routes == [route] * 4  # two notes, two entries put back: each by the route expected


def test_rollback_across_several_storages_and_a_misaligned_storage_start() -> None:
    first = np.arange(64, dtype=np.int32)
    backing = np.zeros(65, dtype=np.int32)
    second = backing.view(np.uint8)[2 : 2 + 128]  # starts two bytes past an aligned address
    second[:] = np.arange(128, dtype=np.uint8)
    keep = (first.copy(), second.copy())
    table = StorageTable(
        [
            (first.ctypes.data, first.ctypes.data + first.nbytes),
            (second.ctypes.data, second.ctypes.data + 128),
        ]
    )
    log = WriteLog()
    across = np.array(
        [first.ctypes.data + 4 * i for i in (3, 60, 1)] + [second.ctypes.data + 4 * i for i in (0, 31, 7)],
        dtype=np.uint64,
    )
    contiguous_in_second = np.array([second.ctypes.data + 4 * i for i in range(16)], dtype=np.uint64)
    gather_in_second = np.array([second.ctypes.data + 4 * i for i in (9, 2, 30, 4, 8, 1, 0, 17)], np.uint64)
    for addrs in (across, contiguous_in_second, gather_in_second):
        log.note(table, addrs, None, 4)
    first[:] = -1
    second[:] = 0xAB
    log.rollback()
    # Only noted lanes come back: the rest keeps what the "launch" wrote.
    assert first[[3, 60, 1]].tolist() == keep[0][[3, 60, 1]].tolist() and first[0] == -1
    touched = sorted({4 * i + k for i in (0, 31, 7, *range(16), 9, 2, 30, 4, 8, 1, 17) for k in range(4)})
    assert second[touched].tobytes() == keep[1][touched].tobytes()
    assert (np.delete(second, touched) == 0xAB).all()


def test_lanes_crossing_a_storage_edge_are_refused_on_every_route() -> None:
    arena = np.zeros(16, dtype=np.int32)
    base = arena.ctypes.data
    table = _arena_log(arena)
    log = WriteLog()
    for addrs in ([base + 4 * i for i in range(1, 17)], [base + 60, base + 8, base + 64, base]):
        with pytest.raises(ValueError, match="outside every argument storage"):
            log.note(table, np.array(addrs, dtype=np.uint64), None, 4)
    assert len(log) == 0


def test_every_route_gathers_what_the_lane_by_lane_route_gathers() -> None:
    rng = np.random.default_rng(11)
    arena = rng.integers(0, 256, size=512, dtype=np.uint8)
    base = arena.ctypes.data
    table = _arena_log(arena)
    cases = [
        (np.arange(base, base + 4 * 100, 4, dtype=np.uint64), 4),  # contiguous
        (np.arange(base + 8, base + 8 + 24 * 16, 24, dtype=np.uint64), 8),  # strided
        (np.array([base + 4 * i for i in (90, 3, 3, 17, 64, 0, 127, 5)], dtype=np.uint64), 4),  # aligned
        (np.array([base + 2 * i + 1 for i in (90, 3, 17, 64, 0, 7, 200, 5)], dtype=np.uint64), 2),  # not
    ]
    for addrs, width in cases:
        log = WriteLog()
        log.note(table, addrs, None, width)
        (entry,) = log.entries()
        assert entry.old.tobytes() == log._gather(table, addrs, width).tobytes()
