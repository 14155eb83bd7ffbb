"""Several processes recording into one SQLite history at once: nothing lost, nothing duplicated."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from tilelens.store import History
from tilelens.store.models import Launch, Run

ROOT = Path(__file__).resolve().parents[1]


def run_concurrency(where: Path, processes: int = 4, launches: int = 40) -> dict[str, Any]:
    where.mkdir(parents=True, exist_ok=True)
    db, blobs = str(where / "shared.db"), str(where / "blobs")
    History.open(db=db, blobs=blobs).close()  # created (and migrated) once, before the race
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRITON_INTERPRET", None)  # the workers record compiled-mode kernels, as users do
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.concurrent_worker", db, blobs, str(launches), str(w)],
            env=env,
            cwd=ROOT,
        )
        for w in range(processes)
    ]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    with History.open(db=db, blobs=blobs) as h, h.session() as s:
        present = s.scalar(select(func.count()).select_from(Launch))
        distinct = s.scalar(
            select(func.count()).select_from(select(Launch.run_id, Launch.seq).distinct().subquery())
        )
        runs = s.scalars(select(Run.status)).all()
    expected = processes * launches
    return {
        "processes": processes,
        "exit_codes": codes,
        "expected": expected,
        "present": present,
        "duplicates": present - distinct,
        "runs": runs,
        "wall_s": wall,
        "launches_per_s": present / wall,
        "ok": codes == [0] * processes and present == expected and present == distinct,
    }
