"""History scale: synthetic histories of 100,000 and 1,000,000 launches, read commands timed whole.

The histories come from scripts/make_synthetic_history.py (rows copied in bulk from a real recording, so they
have exactly the shape the recorder writes); the commands are timed as fresh processes by the same code as
scripts/bench_cli.py, so both report the same thing.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _bench_cli() -> Any:
    spec = importlib.util.spec_from_file_location("tilelens_bench_cli", ROOT / "scripts" / "bench_cli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_history_scale(where: Path, sizes: list[int], repeat: int = 5, budget: float = 0.3) -> dict[str, Any]:
    cli = _bench_cli()
    where.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    rows: list[dict[str, Any]] = []
    for n in sizes:
        db = where / f"h{n}.db"
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "scripts" / "make_synthetic_history.py"),
                str(db),
                "--launches",
                str(n),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        build_s = time.perf_counter() - t0
        launch = cli.pick_launch(db)
        base = [*cli.tilelens_command(), "--db", str(db)]
        commands = cli.read_commands(base, launch)
        for name, argv in commands.items():
            cli.timed(argv, 1)  # page cache and .pyc files
            times = cli.timed(argv, repeat)
            rows.append(
                {
                    "launches": n,
                    "command": name,
                    "min_s": min(times),
                    "median_s": statistics.median(times),
                    "ok": min(times) <= budget,
                }
            )
        blobs = db.with_name("blobs")
        rows.append(
            {
                "launches": n,
                "db_bytes": _size(db),
                "blob_bytes": _size(blobs) if blobs.exists() else 0,
                "build_s": build_s,
            }
        )
    table = ["| launches | command | min | median | within 0.3 s |", "|---|---|---|---|---|"]
    for r in rows:
        if "command" in r:
            table.append(
                f"| {r['launches']:,} | `{r['command']}` | {r['min_s'] * 1e3:.0f} ms | "
                f"{r['median_s'] * 1e3:.0f} ms | {'yes' if r['ok'] else 'NO'} |"
            )
    sizes_lines = [
        f"- {r['launches']:,} launches: database {r['db_bytes'] / 2**20:.1f} MiB, blobs {r['blob_bytes'] / 2**20:.1f} MiB "
        f"(shared by all rows), built in {r['build_s']:.0f} s"
        for r in rows
        if "db_bytes" in r
    ]
    return {"rows": rows, "table": "\n".join(table + [""] + sizes_lines)}
