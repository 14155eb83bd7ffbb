"""A recorded launch read out of the history into plain data, in one short read-only session.

Replays run for seconds to minutes; holding a database session (and, on SQLite, a read snapshot) that long
would block nothing but would pin WAL growth. Copying the handful of rows out first keeps the session short
and lets the rest of replay run without SQLAlchemy in sight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from tilelens.records import KernelIdentity
from tilelens.store import History, HistoryError
from tilelens.store.models import Kernel, Launch


class LaunchNotFoundError(HistoryError):
    """Unknown launch id: an input error, reported like every other history error (one line, exit 2)."""


@dataclass(frozen=True)
class ArgSpec:
    position: int
    name: str
    kind: str
    dtype: str | None
    shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None
    storage_offset: int | None
    storage_group: int | None
    value: Any
    before_blob: str | None
    after_blob: str | None


@dataclass(frozen=True)
class LaunchSpec:
    id: int
    run_id: int
    kernel: KernelIdentity
    grid: tuple[int, int, int]
    config: dict[str, Any]
    status: str
    error: str | None
    device: str
    trace_blob: str | None
    duration_s: float
    args: list[ArgSpec] = field(default_factory=list)

    @property
    def constexprs(self) -> dict[str, Any]:
        """Meta-parameters as launched: the config's, else the constexpr rows (older or hand-made records)."""
        recorded = self.config.get("constexprs")
        if isinstance(recorded, dict):
            return dict(recorded)
        return {a.name: a.value for a in self.args if a.kind == "constexpr"}

    @property
    def options(self) -> dict[str, Any]:
        options = self.config.get("options")
        return dict(options) if isinstance(options, dict) else {}


def load_launch(history: History, launch_id: int) -> LaunchSpec:
    with history.session() as s:
        row = s.execute(
            select(Launch)
            .where(Launch.id == launch_id)
            .options(selectinload(Launch.args), selectinload(Launch.kernel))
        ).scalar_one_or_none()
        if row is None:
            raise LaunchNotFoundError(f"no launch {launch_id} in history {history.location.display_url()}")
        return _spec(row)


def _spec(row: Launch) -> LaunchSpec:
    k: Kernel = row.kernel
    return LaunchSpec(
        id=row.id,
        run_id=row.run_id,
        kernel=KernelIdentity(
            k.module, k.qualname, k.file, k.def_line, k.source, k.source_sha256, k.cache_key
        ),
        grid=(row.grid_x, row.grid_y, row.grid_z),
        config=dict(row.config or {}),
        status=row.status,
        error=row.error,
        device=row.device,
        trace_blob=row.trace_blob,
        duration_s=float(row.duration_s),
        args=[
            ArgSpec(
                position=a.position,
                name=a.name,
                kind=a.kind,
                dtype=a.dtype,
                shape=None if a.shape is None else tuple(int(n) for n in a.shape),
                strides=None if a.strides is None else tuple(int(n) for n in a.strides),
                storage_offset=a.storage_offset,
                storage_group=a.storage_group,
                value=a.value,
                before_blob=a.before_blob,
                after_blob=a.after_blob,
            )
            for a in sorted(row.args, key=lambda a: a.position)
        ],
    )
