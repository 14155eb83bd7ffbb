"""History scale: synthetic histories of 100,000 and 1,000,000 launches, read commands timed whole.

The histories come from scripts/make_synthetic_history.py (rows copied in bulk from a real recording, so they
have exactly the shape the recorder writes); the commands are timed as fresh processes by the same code as
scripts/bench_cli.py, so both report the same thing. With ``new_postgres_db`` (a function returning the URL
of a fresh, empty PostgreSQL database) every size is built and timed on PostgreSQL too: a second column.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
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


def _postgres_bytes(url: str) -> int:
    from tilelens.config import resolve_location
    from tilelens.store.sql.readonly import open_reader

    with open_reader(resolve_location(url, env={})) as reader:
        ((size,),) = reader.execute("SELECT pg_database_size(current_database())").rows
    return int(size)


def run_history_scale(
    where: Path,
    sizes: list[int],
    repeat: int = 5,
    budget: float = 0.3,
    new_postgres_db: Callable[[], str] | None = None,
) -> dict[str, Any]:
    cli = _bench_cli()
    where.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    rows: list[dict[str, Any]] = []
    backends = ["sqlite"] + (["postgresql"] if new_postgres_db is not None else [])
    for n in sizes:
        for backend in backends:
            blobs = where / f"blobs-{backend}-{n}"
            db = str(where / f"h{n}.db") if backend == "sqlite" else new_postgres_db()  # type: ignore[misc]
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "make_synthetic_history.py"), db]
                + ["--blobs", str(blobs), "--launches", str(n)],
                check=True,
                stdout=subprocess.DEVNULL,
                env=env,
            )
            build_s = time.perf_counter() - t0
            launch = cli.pick_launch(db)
            base = [*cli.tilelens_command(), "--db", db, "--blobs", str(blobs)]
            for name, argv in cli.read_commands(base, launch).items():
                cli.timed(argv, 1)  # page cache and .pyc files
                times = cli.timed(argv, repeat)
                rows.append(
                    {
                        "backend": backend,
                        "launches": n,
                        "command": name.replace(str(launch), "ID"),
                        "min_s": min(times),
                        "median_s": statistics.median(times),
                        "ok": min(times) <= budget,
                    }
                )
            rows.append(
                {
                    "backend": backend,
                    "launches": n,
                    "db_bytes": _size(Path(db)) if backend == "sqlite" else _postgres_bytes(db),
                    "blob_bytes": _size(blobs) if blobs.exists() else 0,
                    "build_s": build_s,
                }
            )
    return {"rows": rows, "table": _table(rows, backends, budget)}


def _table(rows: list[dict[str, Any]], backends: list[str], budget: float) -> str:
    """One line per size and command, min / median per backend."""
    head = (
        "| launches | command | "
        + " | ".join(f"{b} min / median" for b in backends)
        + f" | within {budget} s |"
    )
    table = [head, "|---|---|" + "---|" * len(backends) + "---|"]
    timed: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        if "command" in r:
            timed.setdefault((r["launches"], r["command"]), {})[r["backend"]] = r
    for (n, command), per in timed.items():
        cells = [
            f"{per[b]['min_s'] * 1e3:.0f} / {per[b]['median_s'] * 1e3:.0f} ms" if b in per else "-"
            for b in backends
        ]
        ok = all(r["ok"] for r in per.values())
        table.append(f"| {n:,} | `{command}` | " + " | ".join(cells) + f" | {'yes' if ok else 'NO'} |")
    sizes_lines = [
        f"- {r['backend']}, {r['launches']:,} launches: database {r['db_bytes'] / 2**20:.1f} MiB, blobs "
        f"{r['blob_bytes'] / 2**20:.1f} MiB (shared by all rows), built in {r['build_s']:.0f} s"
        for r in rows
        if "db_bytes" in r
    ]
    return "\n".join(table + [""] + sizes_lines)
