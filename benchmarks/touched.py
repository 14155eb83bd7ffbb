"""Snapshots proportional to what a launch touches, and the fixed cost of a tiny launch (issue 18, points 2-3).

* **KV cache**: one launch that reads and rewrites 64 elements of a 256 MiB float32 tensor. Each figure comes
  from its own child process (so peak memory is that program's alone): the plain program under Triton's
  interpreter, and the same program recorded. Reported: whole-program time (tensor creation, launch, and for
  the recorded one opening and closing the history), blob bytes written, peak RSS (``ru_maxrss``), and the
  recorded/plain ratios (targets: time <= 3x, blobs < 4 MiB, RSS < 1.2x).
* **Tiny launch**: a 64-element vector add launched N times, plain and recorded in one block (each launch is
  in the history when it returns): milliseconds per launch, and what recording adds to each.

    python -m benchmarks.touched [--launches 200] [--mib 256]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TRITON_INTERPRET", "1")  # "plain" is Triton's own interpreter; set before Triton loads


def _kernels() -> tuple[Any, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def kv_update(cache_ptr, new_ptr, pos, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        old = tl.load(cache_ptr + pos + offs)
        tl.store(cache_ptr + pos + offs, old * 0.5 + tl.load(new_ptr + offs))

    @triton.jit
    def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(
            out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask
        )

    return kv_update, vector_add


def _child(mode: str, folder: Path, mib: int) -> dict[str, Any]:
    """One program: allocate the cache, launch once; ``mode`` "plain" (stock interpreter) or "record"."""
    import contextlib

    import torch

    kv_update, _ = _kernels()
    t0 = time.perf_counter()
    cache = torch.randn(mib * (1 << 20) // 4)
    new = torch.randn(64)
    if mode == "record":
        import tilelens

        block: Any = tilelens.record(db=str(folder / "t.db"), blobs=str(folder / "blobs"))
    else:
        block = contextlib.nullcontext()
    with block:
        kv_update[(1,)](cache, new, 12345, BLOCK=64)
    elapsed = time.perf_counter() - t0
    blobs = sum(p.stat().st_size for p in (folder / "blobs").rglob("*") if p.is_file())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"seconds": elapsed, "blob_bytes": blobs if mode == "record" else 0, "peak_rss": rss}


def kv_cache(mib: int = 256) -> dict[str, Any]:
    out: dict[str, Any] = {"mib": mib}
    for mode in ("plain", "record"):
        with tempfile.TemporaryDirectory(prefix="tilelens-touched-") as tmp:
            env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.touched",
                    "--child",
                    mode,
                    "--dir",
                    tmp,
                    "--mib",
                    str(mib),
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["time_ratio"] = out["record"]["seconds"] / out["plain"]["seconds"]
    out["rss_ratio"] = out["record"]["peak_rss"] / out["plain"]["peak_rss"]
    return out


def tiny_launches(launches: int = 200) -> dict[str, Any]:
    """Per-launch milliseconds of a 64-element vector add: stock interpreter, and recorded."""
    import torch

    import tilelens

    _, vector_add = _kernels()
    x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
    vector_add[(1,)](x, y, out, 64, BLOCK=64)  # warm: Triton's own first-call work
    t0 = time.perf_counter()
    for _ in range(launches):
        vector_add[(1,)](x, y, out, 64, BLOCK=64)
    plain = (time.perf_counter() - t0) / launches
    with (
        tempfile.TemporaryDirectory(prefix="tilelens-tiny-") as tmp,
        tilelens.record(db=f"{tmp}/t.db", blobs=f"{tmp}/blobs"),
    ):
        vector_add[(1,)](x, y, out, 64, BLOCK=64)  # warm: kernel row, first blobs
        t0 = time.perf_counter()
        for i in range(launches):
            x[0] = float(i)  # a new input each launch, as a program's would be
            vector_add[(1,)](x, y, out, 64, BLOCK=64)
        recorded = (time.perf_counter() - t0) / launches
    return {
        "launches": launches,
        "plain_ms": plain * 1e3,
        "recorded_ms": recorded * 1e3,
        "added_ms": (recorded - plain) * 1e3,
    }


def report(kv: dict[str, Any] | None, tiny: dict[str, Any] | None) -> str:
    lines = []
    if kv is not None:
        p, r = kv["plain"], kv["record"]
        lines += [
            f"| {kv['mib']} MiB cache, 64 elements | plain | recorded | ratio | target |",
            "|---|---|---|---|---|",
            f"| whole program | {p['seconds']:.3f} s | {r['seconds']:.3f} s | {kv['time_ratio']:.2f} | <= 3 |",
            f"| blob bytes | - | {r['blob_bytes']:,} | - | < {4 << 20:,} |",
            f"| peak RSS | {p['peak_rss'] / 2**20:.0f} MiB | {r['peak_rss'] / 2**20:.0f} MiB | "
            f"{kv['rss_ratio']:.2f} | < 1.2 |",
        ]
    if tiny is not None:
        lines += [
            "",
            f"tiny launch (64-element vector add, {tiny['launches']} launches): plain {tiny['plain_ms']:.2f} ms, "
            f"recorded {tiny['recorded_ms']:.2f} ms per launch (recording adds {tiny['added_ms']:.2f} ms)",
        ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--child", choices=("plain", "record"))
    p.add_argument("--dir", type=Path)
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--launches", type=int, default=200)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.dir, args.mib)))
        return 0
    print(report(kv_cache(args.mib), tiny_launches(args.launches)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
