"""Several processes recording into one history at once, readers listing it meanwhile: nothing lost or doubled.

Works on any history URL: a SQLite file (WAL, ``BEGIN IMMEDIATE``) or a PostgreSQL database. Each worker
(benchmarks/concurrent_worker.py) is a separate process recording N launches of a compiled-mode kernel in its
own run; while they run, a reader thread alternates ``tilelens ls`` and ``tilelens sql`` as fresh processes, as
a teammate would. Checked afterwards: every worker exited 0, each run holds exactly its N launches with
sequence numbers 0..N-1 (none lost, none duplicated), no output mentions a lock, and every read succeeded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from tilelens.store import History
from tilelens.store.sql.models import Launch, Run

ROOT = Path(__file__).resolve().parents[1]
LOCK_WORDS = ("locked", "deadlock", "could not serialize", "busy")


def _tilelens() -> list[str]:
    script = Path(sys.executable).with_name("tilelens")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tilelens.cli"]


class _Readers(threading.Thread):
    """``tilelens ls`` and ``tilelens sql`` in turn, as fresh processes, until told to stop."""

    def __init__(self, db: str, blobs: str, env: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.argv = [*_tilelens(), "--db", db, "--blobs", blobs]
        self.env = env
        self.stop = threading.Event()
        self.reads = 0
        self.failures: list[str] = []

    def run(self) -> None:
        commands = (["ls", "--limit", "5"], ["sql", "SELECT count(*) AS n FROM launch_overview"])
        while not self.stop.is_set():
            proc = subprocess.run(
                [*self.argv, *commands[self.reads % 2]],
                capture_output=True,
                text=True,
                env=self.env,
                timeout=120,
            )
            self.reads += 1
            if proc.returncode != 0:
                self.failures.append(proc.stderr.strip()[-300:])


def run_concurrency(
    where: Path,
    processes: int = 4,
    launches: int = 40,
    db: str | None = None,
    readers: bool = True,
) -> dict[str, Any]:
    """``processes`` recorders of ``launches`` each into ``db`` (default: a SQLite file under ``where``)."""
    where.mkdir(parents=True, exist_ok=True)
    db = db or str(where / "shared.db")
    blobs = str(where / "blobs")
    History.open(db=db, blobs=blobs).close()  # created (and migrated) once, before the race
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRITON_INTERPRET", None)  # the workers record compiled-mode kernels, as users do
    reader = _Readers(db, blobs, env) if readers else None
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.concurrent_worker", db, blobs, str(launches), str(w)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(processes)
    ]
    if reader is not None:
        reader.start()
    outputs = [p.communicate() for p in procs]
    wall = time.perf_counter() - t0
    if reader is not None:
        reader.stop.set()
        reader.join()
    codes = [p.returncode for p in procs]
    with History.open(db=db, blobs=blobs) as h, h.session() as s:
        present = s.scalar(select(func.count()).select_from(Launch))
        distinct = s.scalar(
            select(func.count()).select_from(select(Launch.run_id, Launch.seq).distinct().subquery())
        )
        runs = s.scalars(select(Run.status)).all()
        per_run = {
            tag: sorted(s.scalars(select(Launch.seq).join(Run).where(Run.tag == tag)))
            for tag in (f"worker-{w}" for w in range(processes))
        }
    expected = processes * launches
    lock_errors = [
        line
        for out, err in outputs
        for line in (out + err).splitlines()
        if any(w in line.lower() for w in LOCK_WORDS)
    ]
    complete = all(seqs == list(range(launches)) for seqs in per_run.values())
    reads = reader.reads if reader is not None else 0
    read_failures = reader.failures if reader is not None else []
    return {
        "db": "postgresql" if "://" in db and not db.startswith("sqlite") else "sqlite",
        "processes": processes,
        "launches_each": launches,
        "exit_codes": codes,
        "expected": expected,
        "present": present,
        "duplicates": present - distinct,
        "complete_runs": complete,
        "runs": runs,
        "lock_errors": lock_errors,
        "reads": reads,
        "read_failures": read_failures,
        "worker_errors": [err[-500:] for (_, err), code in zip(outputs, codes) if code != 0],
        "wall_s": wall,
        "launches_per_s": present / wall,
        "ok": codes == [0] * processes
        and present == expected == distinct
        and complete
        and not lock_errors
        and not read_failures,
    }


def concurrency_line(conc: dict[str, Any]) -> str:
    return (
        f"{conc['db']}: {conc['processes']} processes x {conc['launches_each']} launches: {conc['expected']} "
        f"expected, {conc['present']} present, {conc['duplicates']} duplicated, lock errors "
        f"{len(conc['lock_errors'])}, {conc['reads']} reads meanwhile ({len(conc['read_failures'])} failed); "
        f"{conc['launches_per_s']:.1f} launches/s over {conc['wall_s']:.1f} s"
    )
