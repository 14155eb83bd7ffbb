"""Compiled recording on a CUDA device (issue 15): record, replay, derive traces, compare with the interpreter.

1. The same seeded workload (the examples, a matmul, Liger RMSNorm / SwiGLU / cross-entropy in bf16 and fp32)
   runs untraced compiled, then under ``tilelens.record(backend="compiled")``: outputs must be bit-identical.
2. Every recorded launch replays on ``cuda`` and on ``cpu``.
3. Every launch gets a derived trace (``derive_traces``), which is compared with the trace the interpreter
   records for the same inputs (``tilelens.record(backend="interpreter")`` of the same workload), where both
   ran with the same config.
Prints a compact summary; exit status 1 if anything failed.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import tilelens  # noqa: E402
from tilelens.replay import replay_launch, select_launches  # noqa: E402
from tilelens.replay.traces import first_difference  # noqa: E402
from tilelens.store import History  # noqa: E402
from tilelens.store.read.launches import load_launch  # noqa: E402


def workload(dev: str = "cuda") -> list[torch.Tensor]:
    """Seeded launches on CUDA tensors; returns every output."""
    import autotuned_matmul
    import softmax
    import vector_add
    from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    from tests import kernels

    torch.manual_seed(0)
    outs = []
    x, y = torch.randn(1000, device=dev), torch.randn(1000, device=dev)
    outs.append(vector_add.add(x, y))
    outs.append(softmax.softmax(torch.randn(64, 1000, device=dev).half()))
    a, b, c = (
        torch.randn(128, 128, device=dev),
        torch.randn(128, 128, device=dev),
        torch.empty(128, 128, device=dev),
    )
    kernels.matmul_kernel[(4, 4)](a, b, c, 128, 128, 128, BM=32, BN=32, BK=32)
    outs.append(c)
    outs.append(autotuned_matmul.matmul(torch.randn(256, 192, device=dev), torch.randn(192, 160, device=dev)))
    for dtype in (torch.bfloat16, torch.float32):
        h = torch.randn(8, 256, device=dev, dtype=dtype)
        outs.append(LigerRMSNormFunction.apply(h, torch.rand(256, device=dev, dtype=dtype), 1e-6))
        g, u = torch.randn(8, 512, device=dev, dtype=dtype), torch.randn(8, 512, device=dev, dtype=dtype)
        outs.append(LigerSiLUMulFunction.apply(g, u))
        logits = torch.randn(8, 1024, device=dev, dtype=dtype)
        loss = LigerCrossEntropyFunction.apply(logits, torch.randint(0, 1024, (8,), device=dev), None)
        outs.append(loss[0] if isinstance(loss, tuple) else loss)
    if dev != "cpu":
        torch.cuda.synchronize()
    return [o.detach().clone() for o in outs]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits (so NaNs compare equal to themselves and -0.0 differs from 0.0)."""
    flat = t.detach().reshape(-1).contiguous()
    return flat.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()])


def main() -> int:
    folder = Path(tempfile.mkdtemp(prefix="tilelens-compiled-"))
    where = {"db": str(folder / "h.db"), "blobs": str(folder / "blobs")}
    problems: list[str] = []
    untraced = workload()
    t0 = time.perf_counter()
    with tilelens.record(backend="compiled", **where) as rec:
        recorded = workload()
    t_rec = time.perf_counter() - t0
    same = [torch.equal(_bits(a), _bits(b)) for a, b in zip(untraced, recorded)]
    print(
        f"compiled recording: {len(rec.launch_ids)} launches in {t_rec:.2f}s, outputs bit-identical: {sum(same)}/{len(same)}"
    )
    if not all(same):
        problems.append(f"outputs differ from the untraced run: {[i for i, s in enumerate(same) if not s]}")
    compiled_run = rec.run_id
    with tilelens.record(backend="interpreter", **where) as irec:
        workload()
    interp_run = irec.run_id
    with History.open(**where) as h:
        ids = select_launches(h, run_id=compiled_run)
        with h.session() as s:
            from sqlalchemy import select

            from tilelens.store.sql.models import AutotuneEventRow, Launch

            gpus = {r for r in s.scalars(select(Launch.gpu_name).where(Launch.run_id == compiled_run))}
            meta = [r for r in s.scalars(select(Launch.config).where(Launch.run_id == compiled_run))]
            events = s.scalars(select(AutotuneEventRow).where(AutotuneEventRow.run_id == compiled_run)).all()
        print(f"gpu: {gpus}; compile metadata of launch 1: {meta[0].get('compiled')}")
        for e in events:
            print(
                f"autotune event: {len(e.configs)} configs, timings {'real' if e.timings else 'none'}: "
                f"{[round(t[0], 4) for t in (e.timings or [])]}, chosen {e.chosen.get('kwargs')}"
            )
        for device in ("cuda", "cpu"):
            outcomes: Counter[str] = Counter()
            for i in ids:
                r = replay_launch(h, i, device=device)
                outcomes[r.outcome] += 1
                if r.outcome != "match":
                    problems.append(f"replay {device}: {r.message[:300]}")
            print(f"replay on {device}: {dict(outcomes)}")
        t0 = time.perf_counter()
        derived = tilelens.derive_traces(h, ids)
        t_derive = (time.perf_counter() - t0) / max(1, len(ids))
        print(f"derived traces: {dict(Counter(r.outcome for r in derived))}, {t_derive:.2f}s per launch")
        problems += [f"derive: {r.message[:300]}" for r in derived if r.outcome != "match"]
        interp_ids = select_launches(h, run_id=interp_run)
        compared = Counter[str]()
        for cid, iid in zip(ids, interp_ids):
            c, i = load_launch(h, cid), load_launch(h, iid)
            if c.kernel.name != i.kernel.name or c.constexprs != i.constexprs or c.trace_blob is None:
                compared["different config (autotune) or no trace"] += 1
                continue
            names = {a.position: a.name for a in c.args}
            diff = first_difference(h.blobs.get_table(i.trace_blob), h.blobs.get_table(c.trace_blob), names)
            compared["equal" if diff is None else "differs"] += 1
            if diff is not None:
                problems.append(
                    f"trace of launch {cid} ({c.kernel.name}) differs from interpreted {iid}: {diff.describe()}"
                )
        print(f"derived vs interpreter-recorded traces: {dict(compared)}")
    for p in problems:
        print("PROBLEM:", p)
    print("OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
