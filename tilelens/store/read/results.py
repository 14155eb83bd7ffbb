"""The answers of ``tilelens ls``, ``show`` and ``export`` as plain data: what the read queries return.

``as_dict()`` of each result is exactly the command line's ``--json`` output, so its keys are only ever added.
Built from rows by :mod:`tilelens.store.read.query`; nothing here touches the database. (The classes are plain, not
frozen, dataclasses: generating their methods is a measurable part of a 0.3 s command.)
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# -- value decoding: SQLite hands back text where PostgreSQL hands back objects -------------------------------


def decode_json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def decode_time(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        value = dt.datetime.fromisoformat(str(value))
    moment = cast(dt.datetime, value)
    return (
        moment.replace(tzinfo=dt.timezone.utc)
        if moment.tzinfo is None
        else moment.astimezone(dt.timezone.utc)
    )


# -- results ------------------------------------------------------------------------------------------------


@dataclass
class LaunchSummary:
    """One line of ``tilelens ls``: a launch with its kernel's name and its access totals."""

    id: int
    run_id: int
    seq: int
    started_at: dt.datetime
    duration_s: float
    kernel: str
    module: str
    qualname: str
    grid: tuple[int, int, int]
    config: dict[str, Any]
    tuning_key: str | None
    role: str
    status: str
    error: str | None
    backend: str
    device: str
    lanes: int  # lanes of every event, masked-off ones included
    active_lanes: int  # lanes that really loaded, stored or did an atomic
    oob_lanes: int
    bytes_loaded: int
    bytes_stored: int
    test_nodeid: str | None = None  # the pytest test it ran in (pytest --tilelens, tilelens record -m pytest)
    # oob_lanes split into loads and stores (atomics count as stores), and the store lanes the recorder kept
    # from being written (outside every argument's memory); None for launches recorded before they were kept.
    oob_load_lanes: int | None = None
    oob_store_lanes: int | None = None
    dropped_lanes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["started_at"] = _iso(self.started_at)
        out["grid"] = list(self.grid)
        return out


@dataclass
class RunSummary:
    """One line of ``tilelens ls --runs``."""

    id: int
    started_at: dt.datetime
    finished_at: dt.datetime | None
    status: str
    exit_code: int | None
    tag: str | None
    argv: list[str]
    cwd: str
    host: str
    launches: int
    kernels: int
    errors: int
    oob_lanes: int
    parent_run_id: int | None = None  # the run of the process that started this one (a child process's run)
    pid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["started_at"] = _iso(self.started_at)
        out["finished_at"] = _iso(self.finished_at)
        return out


@dataclass
class TestSummary:
    """One line of ``tilelens ls --test`` without a pattern: a pytest test that launched kernels."""

    __test__ = False  # not a pytest test class, whatever its name

    nodeid: str
    launches: int
    kernels: int
    errors: int
    oob_lanes: int
    last_launch: int  # its newest launch's id

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class KernelInfo:
    id: int
    module: str
    qualname: str
    file: str
    def_line: int
    cache_key: str | None  # the launch's own Triton cache key (it changes with callees too)
    source_sha256: str
    source: str

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}"

    def as_dict(self) -> dict[str, Any]:
        out = {"name": self.name}
        out.update(asdict(self))
        del out["source"]
        return out


@dataclass
class AccessStats:
    """What one argument's lanes did in one launch."""

    loads: int
    stores: int
    atomics: int
    load_lanes: int
    store_lanes: int
    atomic_lanes: int
    active_lanes: int
    bytes_loaded: int
    bytes_stored: int
    oob_lanes: int
    distinct_elements: int | None  # None when the trace is not available

    @classmethod
    def of(cls, summary: dict[str, Any], distinct: int | None) -> AccessStats:
        get: Callable[[str], int] = lambda key: int(summary.get(key) or 0)  # noqa: E731
        return cls(
            loads=get("loads"),
            stores=get("stores"),
            atomics=get("atomics"),
            load_lanes=get("load_lanes"),
            store_lanes=get("store_lanes"),
            atomic_lanes=get("atomic_lanes"),
            active_lanes=get("load_lanes") + get("store_lanes") + get("atomic_lanes"),
            bytes_loaded=get("bytes_loaded"),
            bytes_stored=get("bytes_stored"),
            oob_lanes=get("oob_lanes"),
            distinct_elements=distinct,
        )


@dataclass
class ArgumentInfo:
    position: int
    name: str
    kind: str
    dtype: str | None
    shape: list[int] | None
    strides: list[int] | None
    storage_offset: int | None
    storage_group: int | None
    device: str | None
    value: Any
    before_blob: str | None
    after_blob: str | None
    access: AccessStats | None
    # A sparse snapshot's element count (the elements the launch touched, tilelens.store.files.sparse); None: whole.
    snapshot_elements: int | None = None

    @property
    def changed(self) -> bool:
        return self.after_blob is not None and self.after_blob != self.before_blob

    @property
    def numel(self) -> int | None:
        if self.shape is None:
            return None
        n = 1
        for size in self.shape:
            n *= int(size)
        return n

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["changed"] = self.changed
        return out


@dataclass
class OobEvent:
    """One memory event with lanes outside every argument: which program, where in the source, how far."""

    pid: tuple[int, int, int]
    event: int
    op: str
    arg: int
    arg_name: str | None
    line: int
    source_text: str | None
    lanes: int
    active: int
    oob_lanes: int
    offsets: tuple[int, int] | None  # smallest and largest element offset of the out-of-bounds lanes
    # Of oob_lanes, those outside every argument's memory: a store or atomic never wrote them, a load read
    # them without touching memory (see tilelens.core.engine.bounds); the rest lay in some argument's storage.
    stray_lanes: int = 0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["pid"] = list(self.pid)
        out["offsets"] = list(self.offsets) if self.offsets is not None else None
        return out


@dataclass
class SourceLine:
    line: int  # line number in the kernel's file
    text: str | None  # None for lines outside the kernel's own source (a @triton.jit helper's, say)
    load_lanes: int = 0
    store_lanes: int = 0
    atomic_lanes: int = 0
    oob_lanes: int = 0  # active lanes out of bounds: renderers mark the line red (and with ``!``)


@dataclass
class AutotuneInfo:
    id: int
    tuning_key: str
    configs: list[Any]
    timings: list[Any] | None
    chosen: dict[str, Any]
    cache_hit: bool
    created_at: dt.datetime

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["created_at"] = _iso(self.created_at)
        return out


@dataclass
class ReplayInfo:
    id: int
    device: str
    backend: str
    outcome: str
    max_abs_err: float | None
    max_rel_err: float | None
    trace_equal: bool | None
    message: str | None
    created_at: dt.datetime

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["created_at"] = _iso(self.created_at)
        return out


@dataclass
class LaunchDetail:
    """Everything ``tilelens show`` prints about one launch."""

    launch: LaunchSummary
    run: dict[str, Any]
    kernel: KernelInfo
    summary: dict[str, int | None]  # the launch's access totals; the oob split is None in older records
    args: list[ArgumentInfo]
    unattributed: AccessStats | None  # lanes that fell in no argument's memory
    trace: dict[str, Any] | None  # blob, rows, bytes
    trace_error: str | None  # the trace exists but cannot be read (missing or corrupt blob)
    oob_events: list[OobEvent]
    oob_event_count: int
    autotune: list[AutotuneInfo]
    replays: list[ReplayInfo]
    source_lines: list[SourceLine] | None = None  # with source=True

    def as_dict(self) -> dict[str, Any]:
        out = self.launch.as_dict()
        out.update(
            run=self.run,
            kernel_info=self.kernel.as_dict(),
            summary=self.summary,
            args=[a.as_dict() for a in self.args],
            unattributed=asdict(self.unattributed) if self.unattributed is not None else None,
            trace=self.trace,
            trace_error=self.trace_error,
            oob_events=[e.as_dict() for e in self.oob_events],
            oob_event_count=self.oob_event_count,
            autotune=[a.as_dict() for a in self.autotune],
            replays=[r.as_dict() for r in self.replays],
            source_lines=[asdict(s) for s in self.source_lines] if self.source_lines is not None else None,
        )
        return out


@dataclass
class ExportResult:
    path: Path
    format: str
    rows: int


@dataclass
class DatasetExport:
    """What ``tilelens export --dataset DIR`` wrote (``as_dict()`` is its ``--json``).

    ``rows`` and ``files`` are per table (launches, arguments, trace_lanes); ``partitions`` counts the
    (kernel, day) pairs; ``traces_read`` the trace blobs read, each once however many launches share it.
    """

    path: Path
    runs: list[int] | None  # None: every run
    rows: dict[str, int]
    files: dict[str, int]
    kernels: int
    partitions: int
    traces_read: int

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["path"] = str(self.path)
        return out


def kernel_line(kernel: KernelInfo, line: int) -> str | None:
    lines = kernel.source.splitlines()
    index = line - kernel.def_line
    return lines[index] if 0 <= index < len(lines) else None


def oob_event_of(row: dict[str, Any], names: dict[int, str], kernel: KernelInfo) -> OobEvent:
    offsets = row["oob_offsets"]
    return OobEvent(
        pid=(int(row["pid_x"]), int(row["pid_y"]), int(row["pid_z"])),
        event=int(row["event"]),
        op=str(row["op"]),
        arg=int(row["arg"]),
        arg_name=names.get(int(row["arg"])),
        line=int(row["line"]),
        source_text=kernel_line(kernel, int(row["line"])),
        lanes=int(row["lanes"]),
        active=int(row["active"]),
        oob_lanes=int(row["oob"]),
        offsets=(int(offsets[0]), int(offsets[1])) if offsets is not None else None,
        stray_lanes=int(row.get("stray") or 0),
    )


def annotated_source(kernel: KernelInfo, counts: dict[int, Any]) -> list[SourceLine]:
    """The kernel's source with lane counts per line, then lines outside it that had accesses."""
    out = []
    for i, text in enumerate(kernel.source.splitlines()):
        line = kernel.def_line + i
        c = counts.get(line)
        out.append(
            SourceLine(line, text, c.load_lanes, c.store_lanes, c.atomic_lanes, c.oob_lanes)
            if c is not None
            else SourceLine(line, text)
        )
    inside = {s.line for s in out}
    for line in sorted(set(counts) - inside):
        c = counts[line]
        out.append(SourceLine(line, None, c.load_lanes, c.store_lanes, c.atomic_lanes, c.oob_lanes))
    return out


def launch_summary_of(row: Sequence[Any]) -> LaunchSummary:
    """One row of the query's launch SELECT (``tilelens.store.read.query``) as a :class:`LaunchSummary`."""
    module, qualname = row[5], row[6]
    return LaunchSummary(
        id=int(row[0]),
        run_id=int(row[1]),
        seq=int(row[2]),
        started_at=decode_time(row[3]),  # type: ignore[arg-type]
        duration_s=float(row[4]),
        kernel=f"{module}.{qualname}",
        module=module,
        qualname=qualname,
        grid=(int(row[7]), int(row[8]), int(row[9])),
        config=decode_json(row[10]) or {},
        tuning_key=row[11],
        role=row[12],
        status=row[13],
        error=row[14],
        backend=row[15],
        device=row[16],
        lanes=int(row[17]),
        active_lanes=int(row[18]),
        oob_lanes=int(row[19]),
        bytes_loaded=int(row[20]),
        bytes_stored=int(row[21]),
        test_nodeid=row[22],
        oob_load_lanes=int_or_none(row[23]),
        oob_store_lanes=int_or_none(row[24]),
        dropped_lanes=int_or_none(row[25]),
    )


def int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
