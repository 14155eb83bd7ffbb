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
from tilelens.store.models import Launch

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
