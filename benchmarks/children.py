"""A pool of worker processes recording into one history: nothing lost, and about as fast as one process.

``tilelens record`` runs a program that launches a small kernel N times, either in the program's own process
or spread over a ``multiprocessing`` pool (fork) of W workers, each recording a child run of its own. The
program times its launches itself (imports and pool start-up excluded: a warm-up launch per process first),
so the figure is launches recorded per second of launching. Target: the pool writes >= 80 % of the launches/s
one process writes alone, and every launch is in the history exactly once.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import json
import multiprocessing as mp
import sys
import time

import torch
import triton
import triton.language as tl


@triton.jit
def inc_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def launch(n):
    x = torch.zeros(64)
    for _ in range(n):
        inc_kernel[(1,)](x, 64, BLOCK=64)
    return float(x.sum())


def warm(_):
    launch(1)
    time.sleep(0.5)  # every worker takes one warm-up task
    return 0


if __name__ == "__main__":
    mode, workers, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if mode == "alone":
        launch(1)
        t0 = time.perf_counter()
        launch(total)
        elapsed = time.perf_counter() - t0
    else:
        with mp.get_context("fork").Pool(workers) as pool:
            pool.map(warm, range(workers), chunksize=1)
            t0 = time.perf_counter()
            assert pool.map(launch, [total // workers] * workers, chunksize=1) == [64.0 * (total // workers)] * workers
            elapsed = time.perf_counter() - t0
    print(json.dumps({"elapsed": elapsed}))
"""


def _record(where: Path, mode: str, workers: int, launches: int) -> dict[str, Any]:
    where.mkdir(parents=True, exist_ok=True)
    (where / "prog.py").write_text(textwrap.dedent(PROGRAM))
    db = where / f"{mode}.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRITON_INTERPRET", None)
    env.pop("TILELENS_FOLLOW", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tilelens.cli", "--db", str(db), "--blobs", str(where / f"{mode}-blobs"),
         "record", "prog.py", mode, str(workers), str(launches)],
        cwd=where, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"{mode}: {proc.stderr[-2000:]}")
    elapsed = json.loads(proc.stdout.strip().splitlines()[-1])["elapsed"]
    with sqlite3.connect(db) as conn:
        present, distinct, runs = conn.execute(
            "SELECT count(*), count(DISTINCT run_id || ':' || seq), count(DISTINCT run_id) FROM launches"
        ).fetchone()
    warmups = 1 if mode == "alone" else workers
    return {
        "mode": mode,
        "expected": launches + warmups,
        "present": present,
        "duplicates": present - distinct,
        "runs": runs,
        "elapsed_s": elapsed,
        "launches_per_s": launches / elapsed,
    }


def run_children(where: Path, workers: int = 4, launches: int = 400) -> dict[str, Any]:
    alone = _record(where / "alone", "alone", 1, launches)
    pool = _record(where / "pool", "pool", workers, launches)
    return {
        "workers": workers,
        "launches": launches,
        "alone": alone,
        "pool": pool,
        "ratio": pool["launches_per_s"] / alone["launches_per_s"],
        "lost": pool["expected"] - pool["present"],
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| recording | launches expected | present | duplicated | runs | launches/s |",
        "|---|---|---|---|---|---|",
    ]
    for key in ("alone", "pool"):
        r = result[key]
        who = "one process" if key == "alone" else f"fork pool of {result['workers']}"
        lines.append(
            f"| {who} | {r['expected']} | {r['present']} | {r['duplicates']} | {r['runs']} | "
            f"{r['launches_per_s']:.1f} |"
        )
    lines.append("")
    lines.append(
        f"pool / one process: {result['ratio']:.2f} (target >= 0.80); launches lost: {result['lost']}"
    )
    return "\n".join(lines)
