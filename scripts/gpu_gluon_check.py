"""Record Gluon kernels on CUDA tensors (TileLens's Gluon simulator), replay each launch compiled on the GPU.

On a CUDA machine, from the repository root::

    python3 scripts/gpu_gluon_check.py [OUT]        # OUT defaults to ./gpu-gluon-out

Every launch of ``tests/gluon_kernels.py`` below runs inside ``tilelens.record()``: the kernel is simulated on
the CPU (CUDA tensors are copied to the host and back, TMA descriptors included), so the recorded outputs are
the simulator's. Then each launch is replayed compiled on the GPU (``replay_launch(..., device="cuda")``: the
compiled Gluon kernel's outputs against the recorded ones, within dtype- and dot-aware tolerances) and
interpreted on the CPU (bit for bit, access trace included). Hopper kernels (TMA, wgmma, warp_specialize) run
on compute capability 9.0 only. Prints one line per replay, writes ``results.json`` into OUT, exits 0 when
every replay matched, else 1 (2 when nothing could be recorded).

Runs with Triton 3.6 through 3.9. The GPU machine's Python may lack TileLens's store dependencies
(sqlalchemy, alembic, mako, greenlet) and Triton 3.6's interpreter needs numpy < 2.4: install wheels of those
with ``pip install --no-index --no-deps --target /tmp/site WHEELS/*.whl`` and put ``/tmp/site`` first on
``PYTHONPATH``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tilelens  # noqa: E402
from tilelens.replay import replay_launch  # noqa: E402
from tilelens.store import History  # noqa: E402


def _launches(hopper: bool) -> list[tuple[str, Callable[[], Any]]]:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from tests import gluon_kernels as gk

    gl = gk.gl

    def vector_add() -> Any:
        x, y = torch.randn(10_000), torch.randn(10_000)
        out = torch.empty(10_000)
        gk.vector_add[(40,)](x, y, out, 10_000, BLOCK=256, layout=gk.BLOCKED_1D)
        return out, x + y

    def row_sum() -> Any:
        x, out = torch.randn(300, 64), torch.empty(300)
        gk.row_sum_through_shared[(10,)](x, out, 300, N=64, BM=32, layout=gk.BLOCKED_2D)
        return out, x.sum(1)

    def blocked_matmul() -> Any:
        a, b, c = torch.randn(128, 96), torch.randn(96, 64), torch.empty(128, 64)
        gk.blocked_matmul[(4, 2)](a, b, c, 128, 64, 96, BM=32, BN=32, BK=32, layout=gk.BLOCKED_2D)
        return c, a @ b

    def shared_views() -> Any:
        x, out = torch.randn(16, 16), torch.empty(16 * 17)
        gk.shared_views[(1,)](x, out, N=16, layout=gk.BLOCKED_2D)
        return out, torch.cat([x.T.reshape(-1), x[0]])

    def autotuned() -> Any:
        x, out = torch.randn(1000), torch.empty(1000)
        gk.autotuned_scale[lambda meta: ((1000 + meta["BLOCK"] - 1) // meta["BLOCK"],)](x, out, 1000)
        return out, x * 2.0

    def tma_wgmma() -> Any:
        a, b = torch.randn(256, 128).half(), torch.randn(128, 128).half()
        c = torch.empty(256, 128).half()
        layout = gk.nvmma_layout([64, 64], gl.float16)
        ad, bd, cd = (TensorDescriptor.from_tensor(t, [64, 64], layout) for t in (a, b, c))
        gk.tma_wgmma_matmul[(4, 2)](ad, bd, cd, 128, num_warps=4)
        return c.float(), a.float() @ b.float()

    def warp_specialized() -> Any:
        x, out = torch.randn(8 * 32, 64), torch.empty(8 * 32)
        xd = TensorDescriptor.from_tensor(x, [32, 64], gk.nvmma_layout([32, 64], gl.float32))
        gk.warp_specialized_row_sum[(1,)](xd, out, 8, STAGES=3, layout=gk.BLOCKED_2D)
        return out, x.sum(1)

    launches = [
        ("vector_add", vector_add),
        ("row_sum_through_shared", row_sum),
        ("blocked_matmul", blocked_matmul),
        ("shared_views", shared_views),
        ("autotuned", autotuned),
    ]
    if hopper:
        launches += [("tma_wgmma_matmul", tma_wgmma), ("warp_specialized_row_sum", warp_specialized)]
    return launches


def record(where: dict[str, str], hopper: bool) -> list[int]:
    torch.manual_seed(0)
    torch.set_default_device("cuda")
    try:
        with tilelens.record(**where) as rec:
            for name, launch in _launches(hopper):
                t0 = time.perf_counter()
                try:
                    got, want = launch()
                    err = (got.double() - want.double()).abs().max().item()
                    print(
                        f"recorded {name:26} simulated {time.perf_counter() - t0:6.2f}s  "
                        f"max|sim - torch| {err:.3g}"
                    )
                except Exception as exc:  # a simulator failure is one line of the report, not the end of it
                    print(f"recorded {name:26} FAILED {type(exc).__name__}: {exc}")
            return list(rec.launch_ids)
    finally:
        torch.set_default_device("cpu")


def main(out: Path) -> int:
    import triton

    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    capability = torch.cuda.get_device_capability()
    print(
        f"{torch.cuda.get_device_name()} (sm_{capability[0]}{capability[1]}), triton {triton.__version__}, "
        f"torch {torch.__version__}"
    )
    out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="tilelens-gluon-"))
    where = {"db": str(folder / "h.db"), "blobs": str(folder / "blobs")}
    ids = record(where, hopper=capability == (9, 0))
    if not ids:
        return 2
    worst = 0
    results = []
    with History.open(**where) as h:
        for device in ("cuda", "cpu"):
            for launch_id in ids:
                r = replay_launch(h, launch_id, device=device)
                worst = max(worst, r.exit_code)
                err = "-" if r.max_abs_err is None else f"{r.max_abs_err:.3g}"
                print(f"{device:4} launch {launch_id:2} {r.outcome:8} {r.kernel:44} max_abs_err={err}")
                print(f"     {r.message}")
                results.append(r.to_dict())
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return worst


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-gluon-out")))
