"""Two launches compared: what ``tilelens diff A B`` reports, as a Python API.

:func:`diff_launches` returns a :class:`LaunchDiff`: the kernel version (with a unified diff of the sources
when they differ), config, grid, status, arguments, every tensor the launches wrote compared element by element
(bit for bit first, through the stored blobs' content hashes, then element by element), and the access traces
compared event by event (the first event that differs, and the field in which it differs).

Invariant: ``LaunchDiff.same`` is true exactly when every part compares equal, so a launch diffed with itself,
or with a re-run of the same kernel on the same inputs and config, is the same. Nothing here writes.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tilelens.store.files.tensordiff import TensorDiff, compare_blobs

if TYPE_CHECKING:
    import pyarrow as pa

    from tilelens.store.read.query import HistoryQuery
    from tilelens.store.read.results import ArgumentInfo, LaunchDetail

# Trace fields in the order a difference is looked for: where the event is, what it is, then its lanes.
TRACE_FIELDS = (
    "pid_x", "pid_y", "pid_z", "op", "arg", "line", "elem_bytes", "lanes", "shape", "base", "strides",
    "offsets", "mask", "oob_mask", "active", "oob", "stray_mask", "stray", "oob_values", "event",
)  # fmt: skip
TRACE_BATCH_ROWS = 65_536  # events compared at a time: a long trace is never turned into Python all at once
SHOWN_BYTES = 32  # a binary field (packed masks, raw bytes) is shown as hex of at most this many bytes


@dataclass
class Change:
    """One named value that differs: ``a`` in the first launch, ``b`` in the second."""

    name: str
    a: Any
    b: Any


@dataclass
class EventDiff:
    """The first trace event that differs: its index, where and what it is (in launch A), and the field."""

    index: int
    pid: tuple[int, int, int] | None
    op: str | None
    line: int | None
    field: str
    a: Any
    b: Any
    # When the event's lanes differ (offsets, mask or out-of-bounds bits) and both have the same block shape:
    # the first lane that differs, and what it was in each trace: {offset, active, oob}.
    lane: int | None = None
    lane_a: dict[str, Any] | None = None
    lane_b: dict[str, Any] | None = None


@dataclass
class TraceDiff:
    same: bool
    events_a: int | None  # None: that launch has no trace
    events_b: int | None
    first: EventDiff | None = None
    note: str | None = None


@dataclass
class LaunchDiff:
    """Everything that differs between launch ``a`` and launch ``b``; empty lists mean "equal"."""

    a: int
    b: int
    kernel_a: str
    kernel_b: str
    source_sha_a: str
    source_sha_b: str
    source_diff: list[str]  # unified diff lines (no trailing newlines); empty when the sources are equal
    launch: list[Change]  # kernel name, grid, status, role
    config: list[Change]  # constexprs, launch options, tuning key (dotted names)
    # per argument: "NAME.field" (dtype, shape, strides, value, input contents); matched by position for one
    # kernel, by name for two different kernels (whose positions mean different things)
    args: list[Change]
    outputs: list[TensorDiff]  # every tensor either launch wrote
    trace: TraceDiff = field(default_factory=lambda: TraceDiff(True, None, None))

    @property
    def same(self) -> bool:
        return (
            self.source_sha_a == self.source_sha_b
            and not (self.launch or self.config or self.args)
            and all(o.same for o in self.outputs)
            and self.trace.same
        )

    @property
    def same_kernel(self) -> bool:
        """Both launches are of one kernel (module.qualname), whatever its version."""
        return self.kernel_a == self.kernel_b

    def as_dict(self) -> dict[str, Any]:
        out = {"same": self.same, "same_kernel": self.same_kernel, **asdict(self)}
        return _json_safe(out)  # type: ignore[no-any-return]


def _json_safe(value: Any) -> Any:
    """NaN and infinities as strings (JSON has none), tuples as lists."""
    if isinstance(value, float) and not math.isfinite(value) or isinstance(value, complex):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def diff_launches(q: HistoryQuery, a: int, b: int) -> LaunchDiff:
    """Compare launch ``a`` with launch ``b`` of the history ``q`` reads (LaunchNotFoundError for a bad id)."""
    da, db = q.launch(a, oob_events=0), q.launch(b, oob_events=0)
    ka, kb = da.kernel, db.kernel
    source_diff: list[str] = []
    if ka.source_sha256 != kb.source_sha256:
        source_diff = [
            line.rstrip("\n")
            for line in difflib.unified_diff(
                ka.source.splitlines(keepends=True),
                kb.source.splitlines(keepends=True),
                fromfile=f"launch {a}: {ka.name} ({ka.source_sha256[:12]})",
                tofile=f"launch {b}: {kb.name} ({kb.source_sha256[:12]})",
            )
        ]
    return LaunchDiff(
        a=a,
        b=b,
        kernel_a=ka.name,
        kernel_b=kb.name,
        source_sha_a=ka.source_sha256,
        source_sha_b=kb.source_sha256,
        source_diff=source_diff,
        launch=_launch_changes(da, db),
        config=_changes(_flat(da.launch.config, "") | _tuning(da), _flat(db.launch.config, "") | _tuning(db)),
        args=_arg_changes(da.args, db.args, by_name=ka.name != kb.name),
        outputs=_outputs(q, da.args, db.args, by_name=ka.name != kb.name),
        trace=_trace_diff(q, da, db),
    )


def _launch_changes(da: LaunchDetail, db: LaunchDetail) -> list[Change]:
    pairs = {
        "kernel": (da.kernel.name, db.kernel.name),
        "grid": (list(da.launch.grid), list(db.launch.grid)),
        "status": (da.launch.status, db.launch.status),
        "role": (da.launch.role, db.launch.role),
        "error": (da.launch.error, db.launch.error),
    }
    return [Change(name, x, y) for name, (x, y) in pairs.items() if x != y]


def _tuning(d: LaunchDetail) -> dict[str, Any]:
    return {"tuning_key": d.launch.tuning_key}


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    """A config as dotted names: ``{"constexprs": {"BLOCK": 64}}`` is ``{"constexprs.BLOCK": 64}``."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, item in value.items():
        out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


_MISSING = object()


def _changes(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    """Keys whose values differ, in A's order then B's new keys; a key one side lacks is None there."""
    out = []
    for key in [*a, *(k for k in b if k not in a)]:
        x, y = a.get(key, _MISSING), b.get(key, _MISSING)
        if x != y:
            out.append(Change(key, None if x is _MISSING else x, None if y is _MISSING else y))
    return out


def _arg_fields(arg: ArgumentInfo) -> dict[str, Any]:
    fields: dict[str, Any] = {"name": arg.name, "kind": arg.kind, "dtype": arg.dtype, "shape": arg.shape}
    fields |= {"strides": arg.strides, "storage_offset": arg.storage_offset, "value": arg.value}
    # The input's contents, by content hash: equal hashes are equal bytes.
    fields["input"] = arg.before_blob
    return fields


def _short(sha: str | None) -> str | None:
    return None if sha is None else f"contents {sha[:12]}"


def _key(arg: ArgumentInfo, by_name: bool) -> int | str:
    return arg.name if by_name else arg.position


def _arg_changes(args_a: list[ArgumentInfo], args_b: list[ArgumentInfo], by_name: bool) -> list[Change]:
    by_b = {_key(arg, by_name): arg for arg in args_b}
    out = []
    for arg in args_a:
        other = by_b.pop(_key(arg, by_name), None)
        if other is None:
            out.append(Change(arg.name, arg.kind, None))
            continue
        for change in _changes(_arg_fields(arg), _arg_fields(other)):
            if change.name == "input":  # hashes say "differs", not how: the outputs get the element compare
                change = Change("input", _short(change.a), _short(change.b))
            out.append(Change(f"{arg.name}.{change.name}", change.a, change.b))
    out += [Change(arg.name, None, arg.kind) for arg in by_b.values()]
    return out


def _outputs(
    q: HistoryQuery, args_a: list[ArgumentInfo], args_b: list[ArgumentInfo], by_name: bool
) -> list[TensorDiff]:
    """Every tensor argument that either launch wrote, its state after A against its state after B."""
    by_b = {_key(arg, by_name): arg for arg in args_b}
    out = []
    for arg in args_a:
        other = by_b.get(_key(arg, by_name))
        if arg.kind != "tensor" or other is None or other.kind != "tensor":
            continue
        if not (arg.changed or other.changed):
            continue
        out.append(
            compare_blobs(q.location.blobs_dir, arg.position, arg.name, arg.after_blob, other.after_blob)
        )
    return out


def _trace_diff(q: HistoryQuery, da: LaunchDetail, db: LaunchDetail) -> TraceDiff:
    ta, tb = da.trace, db.trace
    if ta is None or tb is None:
        same = ta is None and tb is None
        note = None if same else "only one launch has an access trace"
        rows_a = None if ta is None else ta["rows"]
        rows_b = None if tb is None else tb["rows"]
        return TraceDiff(same, rows_a, rows_b, note=note)
    if ta["blob"] == tb["blob"]:  # the same content hash: the same events, byte for byte
        return TraceDiff(True, ta["rows"], tb["rows"])
    table_a, table_b = q.trace(da.launch.id), q.trace(db.launch.id)
    first = first_event_diff(table_a, table_b)
    return TraceDiff(first is None, table_a.num_rows, table_b.num_rows, first)


def first_event_diff(a: pa.Table, b: pa.Table) -> EventDiff | None:
    """The first event (row) where the traces differ, in :data:`TRACE_FIELDS` order; None when equal.

    A trace that is a prefix of the other differs at the first extra event (field ``event``, the missing
    side None).
    """
    names = [n for n in TRACE_FIELDS if n in a.column_names or n in b.column_names]
    for start, rows_a, rows_b in _batches(a, b, names):
        for i, (ra, rb) in enumerate(zip(rows_a, rows_b)):
            for name in names:
                if ra.get(name) != rb.get(name):
                    return _event_diff(start + i, ra, rb, name)
        if len(rows_a) != len(rows_b):
            i = min(len(rows_a), len(rows_b))
            ra = rows_a[i] if i < len(rows_a) else {}
            rb = rows_b[i] if i < len(rows_b) else {}
            return _event_diff(start + i, ra or rb, rb, "event", ra.get("event"), rb.get("event"))
    return None


def _batches(
    a: pa.Table, b: pa.Table, names: list[str]
) -> Iterator[tuple[int, list[dict[str, Any]], list[dict[str, Any]]]]:
    """Batches of rows as Python values, skipping those Arrow finds equal (most of a long similar trace)."""
    total = max(a.num_rows, b.num_rows)
    for start in range(0, total, TRACE_BATCH_ROWS):
        part_a, part_b = _part(a, names, start), _part(b, names, start)
        if part_a.num_rows == part_b.num_rows and part_a.schema == part_b.schema and part_a.equals(part_b):
            continue
        yield start, part_a.to_pylist(), part_b.to_pylist()


def _part(table: pa.Table, names: list[str], start: int) -> pa.Table:
    part = table.slice(start, TRACE_BATCH_ROWS)
    return part.select([n for n in names if n in part.column_names])


def _shown(value: Any) -> Any:
    if isinstance(value, bytes):
        text = value[:SHOWN_BYTES].hex()
        return text + ("…" if len(value) > SHOWN_BYTES else "")
    return value


def _event_diff(index: int, ra: dict[str, Any], rb: dict[str, Any], name: str, *values: Any) -> EventDiff:
    x, y = values if values else (ra.get(name), rb.get(name))
    pid = (ra["pid_x"], ra["pid_y"], ra["pid_z"]) if "pid_x" in ra else None
    out = EventDiff(index, pid, ra.get("op"), ra.get("line"), name, _shown(x), _shown(y))
    if name in LANE_FIELDS and not values:
        _first_lane(out, ra, rb)
    return out


LANE_FIELDS = ("base", "strides", "offsets", "mask", "oob_mask")


def _first_lane(out: EventDiff, ra: dict[str, Any], rb: dict[str, Any]) -> None:
    """Fill in the first lane whose offset, mask bit or out-of-bounds bit differs (same block shape only)."""
    import numpy as np

    from tilelens.store.files.traces import lane_mask, lane_offsets, lane_oob

    if ra.get("shape") != rb.get("shape") or ra.get("shape") is None:
        return
    lanes = [
        (lane_offsets(r).reshape(-1), lane_mask(r).reshape(-1), lane_oob(r).reshape(-1)) for r in (ra, rb)
    ]
    (oa, ma, xa), (ob, mb, xb) = lanes
    differs = np.flatnonzero((oa != ob) | (ma != mb) | (xa != xb))
    if differs.size:
        i = int(differs[0])
        out.lane = i
        out.lane_a = {"offset": int(oa[i]), "active": bool(ma[i]), "oob": bool(xa[i])}
        out.lane_b = {"offset": int(ob[i]), "active": bool(mb[i]), "oob": bool(xb[i])}
