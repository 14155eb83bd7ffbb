"""Record the examples on CUDA tensors, then replay every launch compiled on the GPU and interpreted on the CPU.

Run on a machine with a CUDA device (scripts/gpu_replay_check.sh sets up the environment); writes
``results.json`` (one ReplayResult per replay) into the folder given as the first argument.
"""

from __future__ import annotations

import json
import runpy
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilelens  # noqa: E402
from tilelens.replay import replay_launch, select_launches  # noqa: E402
from tilelens.store import History  # noqa: E402


def record(where: dict[str, str]) -> int:
    """The examples plus larger launches: a TF32 matmul, an fp16 softmax, a bigger autotuned matmul."""
    sys.path.insert(0, str(ROOT / "examples"))
    torch.set_default_device("cuda")
    try:
        t0 = time.perf_counter()
        with tilelens.record(**where) as rec:
            runpy.run_path(str(ROOT / "examples" / "run_all.py"), run_name="__main__")
            import autotuned_matmul
            import softmax

            from tests import kernels

            torch.manual_seed(0)
            a, b, c = torch.randn(128, 128), torch.randn(128, 128), torch.empty(128, 128)
            kernels.matmul_kernel[(4, 4)](a, b, c, 128, 128, 128, BM=32, BN=32, BK=32)
            softmax.softmax(torch.randn(64, 1000).half())
            autotuned_matmul.matmul(torch.randn(256, 192), torch.randn(192, 160))
        print(f"recorded {len(rec.launch_ids)} launches on CUDA tensors in {time.perf_counter() - t0:.1f}s")
        assert rec.run_id is not None
        return rec.run_id
    finally:
        torch.set_default_device("cpu")


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="tilelens-gpu-"))
    where = {"db": str(folder / "h.db"), "blobs": str(folder / "blobs")}
    run_id = record(where)
    results = []
    worst = 0
    with History.open(**where) as h:
        ids = select_launches(h, run_id=run_id)
        for device in ("cuda", "cpu"):
            for launch_id in ids:
                r = replay_launch(h, launch_id, device=device)
                worst = max(worst, r.exit_code)
                err = "-" if r.max_abs_err is None else f"{r.max_abs_err:.3g}"
                print(
                    f"{device:4} launch {launch_id:2} {r.outcome:8} {r.kernel:34} max_abs_err={err:8} "
                    f"run={r.run_s or 0:.3f}s total={r.duration_s:.3f}s recorded={r.record_s or 0:.3f}s"
                )
                print(f"     {r.message}")
                results.append(r.to_dict())
    (out / "results.json").write_text(json.dumps(results, indent=1))
    from tilelens.cli import main as cli

    argv = [
        "--db",
        where["db"],
        "--blobs",
        where["blobs"],
        "replay",
        "--run",
        str(run_id),
        "--device",
        "cuda",
    ]
    print(f"$ tilelens {' '.join(argv[4:])}", flush=True)
    worst = max(worst, cli(argv))
    return worst


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-replay-out")))
