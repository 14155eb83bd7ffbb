"""The grid-batched engine against the per-program one and against Triton's stock interpreter.

Every case of tests/batched_cases.py (the suite's kernels, and the seed workloads of
``benchmarks.workloads.all_cases(quick=True)``, Liger ops included) is recorded twice, with
``TILELENS_ENGINE=batched`` and ``=program``: the launches must agree byte for byte in every tensor argument
before and after, and their access traces (the pyarrow tables) must be equal. The same case then runs in a
``TRITON_INTERPRET=1`` process without TileLens (tests/stock_dump.py); its tensors after each launch must equal
the recorded ones. The fallback cases must record why the batched engine gave up, and still agree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tilelens
from tests import batched_cases
from tilelens.core import compat
from tilelens.records import LaunchRecord

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = 12  # all_cases(quick=True) has 12 on Triton 3.6-3.8, 11 on 3.9 (no block pointers)
# Launches TileLens computes as compiled Triton does, where Triton's stock interpreter cannot run them or
# computes something else (bf16 arithmetic and atomics, see tilelens.core.engine.semantics): the two engines are
# compared, not the stock interpreter. Matched against the case name and the kernels' qualnames.
STOCK_DIFFERS = ("swiglu", "silu", "suite:bf16")
# Cases whose kernel raises (in the stock interpreter too), with what the error says.
FAILING = {
    "fallback:kernel_error": "not_a_method",
    "fallback:assume_fails": "Assume failed",
    "fallback:descriptor_misaligned": "block offset start must be 16-byte aligned",
}
# Cases whose kernel needs what some Triton releases lack: (present in this one, the skip's reason).
NEEDS = {
    "suite:block_ptr": (compat.HAS_BLOCK_POINTERS, compat.NO_BLOCK_POINTERS),
    "suite:block_ptr_moves": (compat.HAS_BLOCK_POINTERS, compat.NO_BLOCK_POINTERS),
    "fallback:atomic_load_store": (
        compat.HAS_ATOMIC_LOAD_STORE,
        f"Triton {compat.triton.__version__} has no tl.atomic_load/tl.atomic_store (Triton 3.9 adds them)",
    ),
}


class _Keeping(tilelens.Recording):
    """A recording that also keeps every launch record it writes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kept: list[LaunchRecord] = []

    def write_launch(self, rec: LaunchRecord) -> int:
        self.kept.append(rec)
        return super().write_launch(rec)


def _record(name: str, engine: str, where: Path, monkeypatch: pytest.MonkeyPatch) -> list[LaunchRecord]:
    monkeypatch.setenv("TILELENS_ENGINE", engine)
    with _Keeping(str(where / "h.db"), where / "blobs", snapshots="all", on_oob="record") as rec:
        try:
            batched_cases.run_case(name, lambda fn: fn())
        except Exception as exc:  # a kernel's own error: recorded, then raised as without TileLens
            assert name in FAILING, exc
    return rec.kept


def _bytes(t: torch.Tensor | None) -> bytes:
    assert t is not None
    return bytes(t.contiguous().view(torch.uint8).numpy().tobytes())


def _final(arg: Any) -> bytes:
    return _bytes(arg.after if arg.after is not None else arg.before)


def _stock_part(dumped: bytes, arg: Any) -> bytes:
    """The stock run's span bytes of ``arg``, or of the elements a sparse snapshot holds (empty: untouched)."""
    if arg.touched is None:
        return dumped
    size = torch.empty(0, dtype=arg.before.dtype).element_size()
    rows = np.frombuffer(dumped, dtype=np.uint8).reshape(-1, size)
    return bytes(rows[arg.touched.numpy()].tobytes())


# Triton 3.6's stock interpreter under numpy >= 2.4 fails on a runtime loop bound (compat.INDEX_NEEDS_SQUEEZE);
# TileLens's own runs of the case do not.
_STOCK_INDEX_BUG = "only 0-dimensional arrays can be converted to Python scalars"
# Triton 3.9's stock interpreter fails on an integer mask it made itself (compat.MASKS_MUST_BE_BOOL: a block
# comparison and-ed with a scalar one, as in the nested_loop workload); TileLens's own runs do not.
_STOCK_MASK_BUG = "mask has unsupported dtype"


def _stock(name: str, where: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILELENS")}
    env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "tests.stock_dump", name, str(where)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _check(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fallback: str | None) -> None:
    present, missing = NEEDS.get(name, (True, ""))
    if not present:
        pytest.skip(missing)
    batched = _record(name, "batched", tmp_path / "batched", monkeypatch)
    program = _record(name, "program", tmp_path / "program", monkeypatch)
    assert batched and len(batched) == len(program)
    for b, p in zip(batched, program):
        assert p.config["engine"] == {"mode": "program", "fallback": "TILELENS_ENGINE=program"}
        if fallback is None:
            assert b.config["engine"]["mode"] == "batched", b.config["engine"]
        else:
            assert b.config["engine"] == {"mode": "program", "fallback": fallback}
        assert (b.status, b.error, b.grid) == (p.status, p.error, p.grid)
        tensors = [(x, y) for x, y in zip(b.args, p.args) if x.kind == "tensor"]
        assert tensors
        for x, y in tensors:
            assert _bytes(x.before) == _bytes(y.before), x.name
            assert (x.after is None) == (y.after is None), x.name
            assert _final(x) == _final(y), x.name
        assert b.trace is not None and p.trace is not None
        assert b.trace.num_rows == p.trace.num_rows > 0
        assert b.trace.equals(p.trace)
        assert b.summary == p.summary and b.per_arg == p.per_arg
    names = [name] + [r.kernel.qualname.lower() for r in batched]
    if any(w in n for w in STOCK_DIFFERS for n in names):
        return
    stock = _stock(name, tmp_path / "stock")
    if stock.returncode != 0 and _STOCK_INDEX_BUG in stock.stderr and compat.INDEX_NEEDS_SQUEEZE:
        # Batched == per-program held above; the stock interpreter itself cannot run this case here.
        assert np.lib.NumpyVersion(np.__version__) >= "2.4.0"
        pytest.skip(
            f"stock Triton {compat.TRITON_VERSION} interpreter under numpy {np.__version__}: {_STOCK_INDEX_BUG}"
        )
    if stock.returncode != 0 and _STOCK_MASK_BUG in stock.stderr and compat.MASKS_MUST_BE_BOOL:
        # Batched == per-program held above; the stock interpreter itself cannot run this case here.
        pytest.skip(
            f"stock Triton {compat.triton.__version__} interpreter: {_STOCK_MASK_BUG} (its C++ loads and "
            "stores take bool masks only, and it makes an int32 mask from a scalar comparison)"
        )
    if name in FAILING:
        assert stock.returncode != 0 and FAILING[name] in stock.stderr
        assert batched[-1].status == "error" and FAILING[name] in str(batched[-1].error)
        return
    assert stock.returncode == 0, stock.stderr[-3000:]
    launches = int((tmp_path / "stock" / "launches").read_text())
    assert launches == len(batched)
    for n, rec in enumerate(batched):
        for arg in rec.args:
            if arg.kind == "tensor":
                dumped = (tmp_path / "stock" / f"{n}_{arg.position}.bin").read_bytes()
                assert _stock_part(dumped, arg) == _final(arg), (n, arg.name)


@pytest.mark.parametrize("case", sorted(batched_cases.SUITE))
def test_suite_kernel_batched_equals_per_program_and_stock(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check(f"suite:{case}", tmp_path, monkeypatch, None)


@pytest.mark.parametrize("index", range(WORKLOADS))
def test_seed_workload_batched_equals_per_program_and_stock(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks.workloads import all_cases

    cases = all_cases(quick=True)
    if index >= len(cases):
        pytest.skip(f"{compat.NO_BLOCK_POINTERS}: the block-pointer seed workload is left out")
    _check(f"workload:{index}", tmp_path, monkeypatch, None)


@pytest.mark.parametrize("case", sorted(batched_cases.FALLBACKS))
def test_fallback_records_its_reason_and_matches(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check(f"fallback:{case}", tmp_path, monkeypatch, batched_cases.FALLBACKS[case][1])


def test_cpu_replay_feeds_recorded_reads_to_the_batched_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tilelens.replay import oobreads, replay_launch
    from tilelens.store import History

    monkeypatch.setenv("TILELENS_ENGINE", "batched")
    with _Keeping(str(tmp_path / "h.db"), tmp_path / "blobs", snapshots="all") as rec:
        batched_cases.run_case("suite:oob", lambda fn: fn())
    (recorded,), (launch_id,) = rec.kept, rec.launch_ids
    assert recorded.config["engine"]["mode"] == "batched" and recorded.summary.oob_load_lanes == 28
    reads = oobreads.cpu_reads(recorded.trace)
    assert reads is not None and len(reads) == 1  # the last program's load past x, fed back by the replay
    replayed: list[LaunchRecord] = []
    with History.open(db=str(tmp_path / "h.db"), blobs=str(tmp_path / "blobs")) as h:
        result = replay_launch(h, launch_id, store=False, on_record=lambda spec, rec: replayed.append(rec))
    assert result.outcome == "match", result.message
    (again,) = replayed
    assert again.config["engine"] == {"mode": "batched"}
    assert again.trace is not None and recorded.trace is not None and again.trace.equals(recorded.trace)


def test_a_grid_too_large_to_hold_at_once_runs_per_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tilelens.core.engine.batched import builder

    monkeypatch.setattr(
        builder, "MAX_LANES", 4 * 256 - 1
    )  # the add case's 4 programs of 256 lanes: one too many
    (recorded,) = _record("suite:add", "batched", tmp_path / "small", monkeypatch)
    assert recorded.config["engine"] == {"mode": "program", "fallback": "grid too large to batch"}
    monkeypatch.setattr(builder, "MAX_LANES", 4 * 256)
    (batched,) = _record("suite:add", "batched", tmp_path / "fits", monkeypatch)
    assert batched.config["engine"]["mode"] == "batched"
    assert recorded.trace is not None and batched.trace is not None and recorded.trace.equals(batched.trace)
    assert [_final(a) for a in recorded.args if a.kind == "tensor"] == [
        _final(a) for a in batched.args if a.kind == "tensor"
    ]
