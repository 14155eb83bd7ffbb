"""On a CUDA machine: record the issue's buggy kernels on CUDA tensors through TileLens, then replay them.

The stock interpreter copies CUDA tensors to host buffers and writes stray store lanes into host memory around
them; under TileLens those lanes must be dropped and recorded. Prints one line per case and exits non-zero
when a case crashes, loses a launch, corrupts a neighbour or fails to replay on the CPU.
Usage: python3 scripts/gpu_oob_check.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilelens  # noqa: E402
from tests import oob_kernels as k  # noqa: E402
from tilelens import api  # noqa: E402


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    db = out / "oob.db"
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run of this script
    big = torch.full((4096,), -7.0, device=dev)  # canaries around the view the kernel gets
    x = torch.arange(1024, dtype=torch.float32, device=dev)
    y = big[1024 : 1024 + 1000]  # a view: stray lanes land in the parent (neighbour memory, written)
    lone = torch.zeros(1000, device=dev)  # its own storage: stray lanes must be dropped
    with tilelens.record(db, tag="gpu-oob") as rec:
        for _ in range(3):
            k.tail_store[(1,)](x, lone, BLOCK=1024)
        k.tail_store[(1,)](x, y, BLOCK=1024)
    if dev == "cuda":
        torch.cuda.synchronize()
    ok = True
    want = x[:1000] * 2
    ok &= bool(torch.equal(lone, want))
    ok &= bool(torch.equal(y, want))
    ok &= bool((big[:1024] == -7).all()) and bool(torch.equal(big[2024:2048], x[1000:] * 2))
    ok &= bool((big[2048:] == -7).all())
    with api.open_query(str(db)) as q:
        rows = q.launches(run=rec.run_id)
        for r in sorted(rows, key=lambda r: r.id):
            print(f"launch {r.id}: status {r.status}, oob lanes {r.oob_lanes}")
    print(f"recorded {len(rows)} launches (want 4); results and canaries {'ok' if ok else 'WRONG'}")
    ok &= len(rows) == 4
    with api.open_history(str(db)) as h:
        for r in sorted(rows, key=lambda r: r.id):
            res = api.replay_launch(h, r.id, device="cpu")
            print(f"replay cpu launch {r.id}: {res.outcome} {res.message}")
            ok &= res.outcome == "match"
            if dev == "cuda":
                res = api.replay_launch(h, r.id, device="cuda:0")
                print(f"replay cuda launch {r.id}: {res.outcome} {res.message}")
    print("GPU OOB CHECK", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
