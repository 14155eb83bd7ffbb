"""Hand-built records for store tests: the store must not depend on the recorder to be tested."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import torch

from tilelens.records import (
    AccessSummary,
    ArgumentRecord,
    AutotuneEvent,
    KernelIdentity,
    LaunchRecord,
    RunInfo,
)


def kernel(
    qualname: str = "add_kernel", source: str = "def add_kernel(x, y, out, n, BLOCK): ..."
) -> KernelIdentity:
    return KernelIdentity(
        module="tests.kernels",
        qualname=qualname,
        file="/src/tests/kernels.py",
        def_line=12,
        source=source,
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        cache_key="c" * 64,
    )


def run_info(tag: str | None = None) -> RunInfo:
    return RunInfo(
        argv=["pytest", "-k", "x"],
        cwd="/src",
        host="testhost",
        versions={"torch": torch.__version__},
        tag=tag,
    )


def trace_table(rows: int = 8) -> pa.Table:
    return pa.table(
        {
            "pid_x": pa.array([i // 4 for i in range(rows)], pa.int32()),
            "op": pa.array(["load"] * (rows - 1) + ["store"], pa.string()),
            "offsets": pa.array([[i * 4 + j for j in range(4)] for i in range(rows)], pa.list_(pa.int64())),
        }
    )


def launch(
    x: torch.Tensor | None = None,
    out_before: torch.Tensor | None = None,
    out_after: torch.Tensor | None = None,
    *,
    k: KernelIdentity | None = None,
    trace: pa.Table | None = None,
    seq: int = 0,
    config: dict[str, Any] | None = None,
    **fields: Any,
) -> LaunchRecord:
    """An add-like launch: ``x`` read, ``out`` written (``out_after`` None means unchanged), two scalars."""
    x = torch.arange(16, dtype=torch.float32) if x is None else x
    out_before = torch.zeros_like(x) if out_before is None else out_before
    args = [
        ArgumentRecord(
            0,
            "x_ptr",
            "tensor",
            str(x.dtype),
            tuple(x.shape),
            x.stride(),
            x.storage_offset(),
            0,
            "cpu",
            before=x,
        ),
        ArgumentRecord(
            1,
            "out_ptr",
            "tensor",
            str(out_before.dtype),
            tuple(out_before.shape),
            out_before.stride(),
            out_before.storage_offset(),
            1,
            "cpu",
            before=out_before,
            after=out_after,
        ),
        ArgumentRecord(2, "n", "scalar", value=int(x.numel())),
        ArgumentRecord(3, "BLOCK", "constexpr", value=4),
    ]
    summary = AccessSummary(
        loads=4, stores=4, load_lanes=16, store_lanes=16, bytes_loaded=64, bytes_stored=64, events=8, lanes=32
    )
    rec = LaunchRecord(
        kernel=k or kernel(),
        grid=(4, 1, 1),
        args=args,
        config=config if config is not None else {"BLOCK": 4, "num_warps": 4},
        summary=summary,
        trace=trace,
        seq=seq,
        **fields,
    )
    if hasattr(rec, "per_arg"):
        rec.per_arg = {
            0: AccessSummary(loads=4, load_lanes=16, bytes_loaded=64, events=4, lanes=16),
            1: AccessSummary(stores=4, store_lanes=16, bytes_stored=64, events=4, lanes=16),
        }
    return rec


def autotune_event(k: KernelIdentity | None = None) -> AutotuneEvent:
    configs = [{"BLOCK": 64, "num_warps": 4}, {"BLOCK": 128, "num_warps": 8}]
    return AutotuneEvent(
        kernel=k or kernel(),
        tuning_key="(1024,)",
        configs=configs,
        chosen=configs[1],
        timings=[[0.5, 0.4, 0.6], [0.2, 0.1, 0.3]],
    )


def dump_rows(engine: Any) -> list[str]:
    """Every row of every table of a history (SQLite or PostgreSQL), in a stable order: what "nothing was
    changed" compares."""
    import sqlalchemy as sa

    out: list[str] = []
    with engine.connect() as conn:
        meta = sa.MetaData()
        meta.reflect(conn)
        for table in sorted(meta.tables.values(), key=lambda t: t.name):
            rows = conn.execute(sa.select(table)).fetchall()
            out += sorted(f"{table.name} {tuple(r)!r}" for r in rows)
    return out
