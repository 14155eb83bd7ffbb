"""The write log: old bytes of every written lane, noted before the write, put back on rollback."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from tilelens.core.arguments import kernel_params
from tilelens.core.bounds import StorageTable
from tilelens.core.identity import kernel_identity
from tilelens.core.interpreter import make_interpreted
from tilelens.core.launch import LaunchMeta, run_interpreted
from tilelens.core.writelog import WriteLog
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
