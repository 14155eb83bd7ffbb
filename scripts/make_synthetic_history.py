"""Fill a history with many launches fast, for measuring the read commands at scale.

Usage: python scripts/make_synthetic_history.py PATH_OR_URL [--blobs DIR] [--launches 100000] [--runs 100]
       [--kernels 50]

PATH_OR_URL is a new SQLite file or an empty PostgreSQL database (``postgresql://...``); on PostgreSQL the
rows go in with COPY, then the id sequences are moved past them and the tables analysed.

The examples are recorded for real first (real kernels, real rows, real trace and tensor blobs); their rows
are then copied in bulk through SQLAlchemy Core, so every synthetic launch has exactly the shape of one the
recorder wrote and points at a real blob (the blobs are shared, the rows are not). Copies vary what the
read commands filter on: run, kernel (versions of the example kernels under other names), status, time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import JSON, func, insert, select  # noqa: E402

from tilelens.store import History  # noqa: E402
from tilelens.store.sql.models import AutotuneEventRow, Kernel, Launch, LaunchArg, Run  # noqa: E402

CHUNK = 20_000


def record_examples(db: str, blobs: str | None = None) -> None:
    """One real recording of every example: the rows and blobs every copy is made from."""
    import tilelens

    sys.path.insert(0, str(ROOT / "examples"))
    import autotuned_matmul
    import heuristics_scale
    import oob_bug
    import softmax
    import vector_add

    with tilelens.record(db=db, blobs=blobs, tag="seed"):
        for example in (vector_add, softmax, autotuned_matmul, heuristics_scale, oob_bug):
            example.main()


def rows(conn: Any, table: Any) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(select(table).order_by(*table.primary_key.columns))]


def _copy_rows(conn: Any, table: Any, batch: list[dict[str, Any]]) -> None:
    """PostgreSQL: the rows through COPY, an order of magnitude faster than INSERTs at this size."""
    columns = [c.name for c in table.columns if c.name in batch[0]]
    as_json = [isinstance(table.c[c].type, JSON) for c in columns]  # JSON text, scalars and strings too
    raw = conn.connection.driver_connection
    with raw.cursor().copy(f"COPY {table.name} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in batch:
            copy.write_row(
                [
                    json.dumps(v) if j and v is not None else v
                    for v, j in zip((row[c] for c in columns), as_json)
                ]
            )


def build(
    path: str,
    launches: int,
    runs: int,
    kernels: int,
    blobs: str | None = None,
    seed: Callable[[str, str | None], None] = record_examples,
) -> None:
    """``seed(path, blobs)`` records the real launches every synthetic one copies (the examples by default)."""
    started = time.perf_counter()
    seed(path, blobs)
    print(f"seed recording: {time.perf_counter() - started:.1f} s", file=sys.stderr)

    with History.open(path, blobs) as history, history.engine.begin() as conn:
        postgres = conn.dialect.name == "postgresql"
        seed_launches = rows(conn, Launch.__table__)
        seed_args = rows(conn, LaunchArg.__table__)
        seed_kernels = rows(conn, Kernel.__table__)
        seed_events = {r["launch_id"]: r for r in rows(conn, AutotuneEventRow.__table__)}
        (seed_run,) = rows(conn, Run.__table__)
        args_of: dict[int, list[dict[str, Any]]] = {}
        for a in seed_args:
            args_of.setdefault(a["launch_id"], []).append(a)

        # Kernel versions: the seed kernels under other module names, same source (so traces and lines agree).
        kernel_rows = []
        for i in range(max(0, kernels - len(seed_kernels))):
            k = dict(seed_kernels[i % len(seed_kernels)])
            k.pop("id")
            k["module"] = f"synthetic{i // len(seed_kernels)}.{k['module']}"
            kernel_rows.append(k)
        if kernel_rows:
            conn.execute(insert(Kernel.__table__), kernel_rows)
        kernel_of_seed = {k["id"]: k for k in seed_kernels}
        all_kernels = rows(conn, Kernel.__table__)
        versions: dict[str, list[int]] = {}
        for k in all_kernels:
            versions.setdefault(k["source_sha256"], []).append(k["id"])

        t0 = seed_run["started_at"] - dt.timedelta(days=30)
        run_rows = []
        for r in range(runs):
            run = dict(seed_run)
            run.pop("id")
            run.update(
                uuid=str(uuid.uuid4()),
                tag=f"synthetic-{r % 7}",
                status="failed" if r % 10 == 9 else "ok",
                exit_code=1 if r % 10 == 9 else 0,
                started_at=t0 + dt.timedelta(minutes=r * 10),
                finished_at=t0 + dt.timedelta(minutes=r * 10 + 5),
            )
            run_rows.append(run)
        conn.execute(insert(Run.__table__), run_rows)
        run_ids = [
            r[0] for r in conn.execute(select(Run.id).where(Run.tag.like("synthetic-%")).order_by(Run.id))
        ]

        next_id = conn.execute(select(func.max(Launch.id))).scalar_one() + 1
        per_run = max(1, launches // runs)
        launch_batch: list[dict[str, Any]] = []
        arg_batch: list[dict[str, Any]] = []
        event_batch: list[dict[str, Any]] = []

        def flush() -> None:
            for table, batch in (
                (Launch.__table__, launch_batch),
                (LaunchArg.__table__, arg_batch),
                (AutotuneEventRow.__table__, event_batch),
            ):
                if batch and postgres:
                    _copy_rows(conn, table, batch)
                elif batch:
                    conn.execute(insert(table), batch)
            launch_batch.clear()
            arg_batch.clear()
            event_batch.clear()

        for i in range(launches):
            seed = seed_launches[i % len(seed_launches)]
            launch_id = next_id + i
            run_index = min(i // per_run, len(run_ids) - 1)
            run_id = run_ids[run_index]
            sha = kernel_of_seed[seed["kernel_id"]]["source_sha256"]
            choices = versions[sha]
            when = t0 + dt.timedelta(minutes=(i // per_run) * 10, milliseconds=(i % per_run) * 3)
            launch = dict(seed)
            launch.update(
                id=launch_id,
                run_id=run_id,
                seq=i - run_index * per_run,  # unique in its run (schema 0004), the last run taking the rest
                kernel_id=choices[(i // len(seed_launches)) % len(choices)],
                started_at=when,
                created_at=when,
            )
            if i % 97 == 13:
                launch.update(status="error", error="synthetic failure: IndexError in the kernel")
            launch_batch.append(launch)
            for a in args_of.get(seed["id"], []):
                arg = dict(a)
                arg.pop("id")
                arg["launch_id"] = launch_id
                arg_batch.append(arg)
            event = seed_events.get(seed["id"])
            if event is not None:
                ev = dict(event)
                ev.pop("id")
                ev.update(launch_id=launch_id, run_id=run_id, kernel_id=launch["kernel_id"], created_at=when)
                event_batch.append(ev)
            if len(launch_batch) >= CHUNK:
                flush()
        if launch_batch:
            flush()
        if postgres:  # explicit ids leave the sequences behind; the planner needs statistics
            for name in ("launches", "launch_args", "autotune_events"):
                conn.exec_driver_sql(
                    f"SELECT setval(pg_get_serial_sequence('{name}', 'id'), (SELECT max(id) FROM {name}))"
                )
    if postgres:
        with History.open(path, blobs) as history, history.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
    print(
        f"{launches:,} synthetic launches in {len(run_ids)} runs over {len(all_kernels)} kernels: "
        f"{time.perf_counter() - started:.1f} s in all ({path})",
        file=sys.stderr,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "path", help="SQLite file to create (must not exist), or an empty PostgreSQL database URL"
    )
    parser.add_argument("--blobs", default=None, help="blob folder (default: as for --blobs)")
    parser.add_argument("--launches", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--kernels", type=int, default=50)
    args = parser.parse_args()
    if "://" not in args.path:
        path = Path(args.path)
        if path.exists():
            parser.error(f"{path} exists; give a new file")
        path.parent.mkdir(parents=True, exist_ok=True)
    build(args.path, args.launches, args.runs, args.kernels, args.blobs)


if __name__ == "__main__":
    main()
