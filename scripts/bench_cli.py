"""Wall time of the read commands on a large history, process start included.

Usage: python scripts/bench_cli.py [--db PATH] [--launches 100000] [--repeat 7] [--budget 0.3]

Without --db a synthetic history is made first (scripts/make_synthetic_history.py, in a temp folder).
Each command runs ``--repeat`` times as a fresh ``tilelens`` process; the minimum and the median are
printed, and the exit status is 1 if any minimum is over ``--budget`` seconds.

The commands run with bytecode caching on (PYTHONDONTWRITEBYTECODE removed from their environment), as
an installed TileLens runs: compiling every module from source on each start is not what users pay.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tilelens_command() -> list[str]:
    script = Path(sys.executable).with_name("tilelens")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tilelens.cli"]


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return times


def pick_launch(db: Path | str) -> int:
    """A recent launch with a real trace and out-of-bounds lanes: the most work ``show`` ever does here."""
    sys.path.insert(0, str(ROOT))
    from tilelens.config import resolve_location
    from tilelens.store.sql.readonly import open_reader

    with open_reader(resolve_location(str(db), env={})) as reader:
        ((found,),) = reader.execute(
            "SELECT max(id) FROM launches WHERE oob_lanes > 0 AND trace_blob IS NOT NULL"
        ).rows
        if found is None:
            ((found,),) = reader.execute("SELECT max(id) FROM launches").rows
    return int(found)


def read_commands(base: list[str], launch: int) -> dict[str, list[str]]:
    """The read commands the 0.3 s budget is about, on the history ``base`` names (also used by bench.py)."""
    return {
        "ls --limit 50": [*base, "ls", "--limit", "50"],
        f"show {launch}": [*base, "show", str(launch)],
        "sql (indexed)": [
            *base,
            "sql",
            f"SELECT launch_id, kernel, grid, oob_lanes FROM launch_overview WHERE launch_id = {launch}",
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=None, help="existing history (default: make one)")
    parser.add_argument("--launches", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--budget", type=float, default=0.3)
    args = parser.parse_args()

    tmp = None
    db = args.db
    if db is None:
        tmp = Path(tempfile.mkdtemp(prefix="tilelens-bench-"))
        db = tmp / "h.db"
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_synthetic_history.py"), str(db)]
            + ["--launches", str(args.launches)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    try:
        base = [*tilelens_command(), "--db", str(db)]
        launch = pick_launch(db)
        commands = read_commands(base, launch)
        commands["sql (index, count)"] = [
            *base,
            "sql",
            "SELECT count(*) FROM launches WHERE kernel_id = 3 AND status = 'error'",
        ]
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            n = conn.execute("SELECT count(*) FROM launches").fetchone()[0]
        print(f"history: {db} ({n:,} launches); {args.repeat} runs each, process start included")
        over = False
        for name, argv in commands.items():
            timed(argv, 1)  # warm the page cache and the .pyc files
            times = timed(argv, args.repeat)
            best, median = min(times), statistics.median(times)
            verdict = "ok" if best <= args.budget else f"OVER {args.budget:.2f} s"
            over |= best > args.budget
            print(f"  {name:<22} min {best * 1e3:7.1f} ms   median {median * 1e3:7.1f} ms   {verdict}")
        return 1 if over else 0
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
