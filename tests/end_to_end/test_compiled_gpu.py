"""Compiled recording on a real CUDA device (skipped without one; run on the H200 by scripts/gpu_compiled_check.py
too): outputs bit-identical to the untraced run, compile metadata and GPU name stored, CUDA and CPU replays
match, the derived trace equals the interpreter-recorded trace of the same inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sqlalchemy import select

import tilelens
from tests.unit.test_compiled_recording import scale_kernel
from tilelens.replay import replay_launch
from tilelens.replay.traces import first_difference
from tilelens.store import History
from tilelens.store.sql.models import Launch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def _launch(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    scale_kernel[(triton_cdiv(x.numel(), 128),)](x, y, x.numel(), 1.0, BLOCK=128)
    return y


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def test_compiled_recording_on_cuda(tmp_path: Path) -> None:
    torch.manual_seed(0)
    x = torch.randn(1000, device="cuda")
    untraced = _launch(x)
    where = {"db": str(tmp_path / "h.db"), "blobs": tmp_path / "b"}
    with tilelens.record(backend="compiled", **where) as rec:  # type: ignore[arg-type]
        recorded = _launch(x)
    with tilelens.record(backend="interpreter", **where) as irec:  # type: ignore[arg-type]
        _launch(x)
    assert torch.equal(untraced, recorded)
    with History.open(**where) as h:  # type: ignore[arg-type]
        (cid,) = rec.launch_ids
        (iid,) = irec.launch_ids
        with h.session() as s:
            launch = s.get(Launch, cid)
            assert launch is not None
            assert launch.backend == "compiled" and launch.device.startswith("cuda")
            assert launch.gpu_name == torch.cuda.get_device_name()
            assert launch.config["compiled"]["num_warps"] == 4
        assert replay_launch(h, cid, device="cuda").outcome == "match"  # 1.0 stays a float on cuda
        assert replay_launch(h, cid, device="cpu").outcome == "match"
        (derived,) = tilelens.derive_traces(h, [cid])
        assert derived.outcome == "match" and derived.derived_trace
        with h.session() as s:
            traces = dict(s.execute(select(Launch.id, Launch.trace_blob)).all())
        names = {0: "x_ptr", 1: "y_ptr"}
        assert first_difference(h.blobs.get_table(traces[iid]), h.blobs.get_table(traces[cid]), names) is None


def test_the_fast_path_on_cuda_stores_what_the_snapshot_path_describes(tmp_path: Path) -> None:
    """``snapshots="none"`` reads the arguments Triton bound (``compiled_frames.GridProbe``) and sends plain values to
    the writer process; ``snapshots="all"`` describes them at launch time. Over a step of Liger RMSNorm,
    SwiGLU, cross entropy (a constexpr string) and an autotuned matmul: the same rows, no launch lost, and the
    outputs of both equal the untraced run's bit for bit."""
    pytest.importorskip("liger_kernel")
    from benchmarks.compiled_step import Step
    from tests.unit.test_writer_process import _rows

    step = Step(tokens=128, hidden=256, inter=512, vocab=1024, layers=2)
    untraced = step.run()
    torch.cuda.synchronize()
    rows = {}
    for mode in ("none", "all"):
        where = {"db": str(tmp_path / f"{mode}.db"), "blobs": tmp_path / mode}
        with tilelens.record(backend="compiled", snapshots=mode, **where) as rec:  # type: ignore[arg-type]
            out = step.run()
        assert torch.equal(out, untraced)
        assert (
            rec.write_failure is None and len(rec.launch_ids) == 12
        )  # 5 per block, the vocabulary matmul, the cross entropy
        rows[mode] = [
            (*r[:-1], [a[:-1] for a in r[-1]]) for r in _rows(tmp_path / f"{mode}.db", tmp_path / mode)
        ]
    assert rows["none"] == rows["all"]
    names = [r[1] for r in rows["none"]]
    assert names.count("bf16_matmul_kernel") == 7 and "liger_cross_entropy_kernel" in names
    ce = rows["none"][names.index("liger_cross_entropy_kernel")]
    assert ("reduction", "constexpr", "mean") in [(a[1], a[2], a[7]) for a in ce[-1]]
    mm = rows["none"][names.index("bf16_matmul_kernel")]
    assert mm[7] is not None and mm[6]["autotune"]["chosen"]["kwargs"]["BM"] in (64, 128)
