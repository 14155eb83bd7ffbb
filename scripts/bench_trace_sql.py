#!/usr/bin/env python3
"""Trace SQL at scale: ``tilelens sql`` over ``trace_events`` on histories of many launches of one small kernel.

    python scripts/bench_trace_sql.py [--sizes 2000 100000] [--repeat 3] [--json FILE]

Each history holds 64 real launches of ``scale_kernel`` below (4 programs of 1024 lanes, one load and one
store each: 8,192 lanes a launch; ``n`` differs, so the 64 traces differ in their masks), copied in bulk to
the size asked (scripts/make_synthetic_history.py: the copies share the 64 trace blobs, as launches of one
kernel on recurring shapes do). At 2,000 launches that is 16.4M lanes. Each query is timed as a whole
``tilelens sql`` process (interpreter start and imports included), the median of ``--repeat`` runs, and its
answer is checked against the history's own counts. Issue 49's targets at 2,000 launches: one launch
< 1.5 s, a group-by over every lane < 4 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
BLOCK, PROGRAMS, TRACES = 1024, 4, 64
LANES_PER_LAUNCH = 2 * BLOCK * PROGRAMS

QUERIES = {
    "one launch": "SELECT count(*) AS lanes FROM trace_events WHERE launch_id = 7",
    "group-by over every lane": (
        "SELECT line, op, count(*) AS lanes, count(*) FILTER (WHERE active) AS active "
        "FROM trace_events GROUP BY line, op ORDER BY line, op"
    ),
}


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2 + 1, mask=mask)


def seed(path: str, blobs: str | None) -> None:
    """64 launches whose masks differ: ``n`` from 3,073 to 4,081 on a grid of four 1,024-lane programs."""
    import tilelens

    x = torch.arange(BLOCK * PROGRAMS, dtype=torch.float32)
    y = torch.empty_like(x)
    with tilelens.record(db=path, blobs=blobs, tag="trace-sql-seed"):
        for i in range(TRACES):
            scale_kernel[(PROGRAMS,)](x, y, BLOCK * (PROGRAMS - 1) + 1 + 16 * i, BLOCK=BLOCK)


def timed(db: Path, sql: str, repeat: int) -> tuple[float, list[Any]]:
    """Median seconds of ``tilelens sql --format json`` as a fresh process, and its rows."""
    took, rows = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "tilelens.cli", "--db", str(db), "sql", "--format", "json", sql],
            capture_output=True,
            text=True,
            cwd=db.parent,  # not the checkout: its tilelens would shadow the one installed (or on PYTHONPATH)
        )
        took.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"tilelens sql failed: {done.stderr.strip()}")
        rows = json.loads(done.stdout)
    return statistics.median(took), rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    import make_synthetic_history as synthetic  # beside this script, so on sys.path when it runs

    report: list[dict[str, Any]] = []
    print("| launches | lanes | query | seconds (median) |\n| ---: | ---: | --- | ---: |")
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="tilelens-trace-sql-") as tmp:
            db = Path(tmp) / "h.db"
            # The 64 seed launches stay in the history too: they are launches like any other.
            synthetic.build(str(db), size - TRACES, max(1, size // 100), 1, str(Path(tmp) / "blobs"), seed)
            lanes = size * LANES_PER_LAUNCH
            for name, sql in QUERIES.items():
                seconds, rows = timed(db, sql, args.repeat)
                if name == "one launch":
                    assert rows == [{"lanes": LANES_PER_LAUNCH}], rows
                else:
                    assert sum(r["lanes"] for r in rows) == lanes, rows
                print(f"| {size:,} | {lanes / 1e6:.1f}M | {name} | {seconds:.2f} |", flush=True)
                report.append({"launches": size, "lanes": lanes, "query": name, "seconds": seconds})
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
