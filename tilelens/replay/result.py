"""What a replay found, as plain data: the CLI renders it, ``--json`` dumps it, the store keeps its summary.

Outcomes follow the exit-code contract of the command line: ``match`` (0), ``mismatch`` (1: the kernel no longer
does what was recorded), ``error`` (2: the launch could not be replayed as asked, or was recorded failing).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from tilelens.errors import ReplayFailure
from tilelens.records import ReplayOutcome

EXIT_CODES: dict[ReplayOutcome, int] = {"match": 0, "mismatch": 1, "error": 2, "unknown-read": 3}

__all__ = ["EXIT_CODES", "ReplayFailure", "ReplayResult", "TensorDiff", "TraceDiff", "Writer"]


@dataclass(frozen=True)
class Writer:
    """The access that last wrote an element, found in the replay's own trace: where to start looking."""

    program: tuple[int, int, int]
    event: int
    op: str
    line: int

    def describe(self) -> str:
        return f"{self.op} at line {self.line}, program {self.program}, event {self.event}"


@dataclass
class TensorDiff:
    """One tensor argument's replayed state against the recorded one.

    Indices are view indices (``(row, col)``) when the element lies in the view, else the element's offset in
    the span the view reaches, written ``span[k]``.
    """

    position: int
    name: str
    dtype: str
    equal: bool
    elements: int = 0
    mismatched: int = 0
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    worst_index: str | None = None
    worst_recorded: Any = None
    worst_replayed: Any = None
    first_index: str | None = None
    first_offset: int | None = None  # in the span, which is what the access trace's offsets count
    first_recorded: Any = None
    first_replayed: Any = None
    written_by: Writer | None = None
    atol: float | None = None  # the tolerance applied; None: bit for bit
    rtol: float | None = None
    sparse: bool = False  # rebuilt from a sparse snapshot: elements the record did not touch were zeros

    def describe(self) -> str:
        if self.equal:
            return f"{self.name} matches"
        text = (
            f"{self.name}{self.first_index} differs (recorded {_fmt(self.first_recorded)}, replayed "
            f"{_fmt(self.first_replayed)}; {self.mismatched} of {self.elements} elements"
        )
        if self.max_abs_err is not None:
            text += f", max abs err {_fmt(self.max_abs_err)}"
        if self.worst_index is not None:  # none when the values differ in bits only (0.0 and -0.0, NaNs)
            text += f" at {self.name}{self.worst_index}"
        text += ")"
        if self.written_by is not None:
            text += f", last written by {self.written_by.describe()}"
        return text


@dataclass
class TraceDiff:
    """The first access event where the replayed trace and the recorded one part ways."""

    row: int
    field: str  # a trace column, or "events" when one trace ends first
    recorded: Any
    replayed: Any
    program: tuple[int, int, int] | None = None
    event: int | None = None
    op: str | None = None
    arg: str | None = None
    line: int | None = None

    def describe(self) -> str:
        where = f"event {self.event} of program {self.program}" if self.program is not None else "the end"
        what = " ".join(
            p
            for p in (
                self.op or "",
                f"of {self.arg}" if self.arg else "",
                f"at line {self.line}" if self.line is not None else "",
            )
            if p
        )
        return (
            f"trace differs at {where}"
            + (f" ({what})" if what else "")
            + f": {self.field} recorded {_fmt(self.recorded)}, replayed {_fmt(self.replayed)}"
        )


@dataclass
class ReplayResult:
    """Everything one replay established; ``exit_code`` is what ``tilelens replay`` exits with."""

    launch_id: int
    kernel: str
    device: str
    backend: str
    outcome: ReplayOutcome
    message: str  # one line: what the CLI prints and the replay row keeps
    headline: str = ""  # the message's "launch N (kernel) on device" part, for a mismatch listed below it
    details: list[str] = field(default_factory=list)  # the mismatches the message joins, one per entry
    source_changed: bool = False
    refusal: str | None = None  # why the replay did not run: "source-changed", "file-changed"; else None
    file_changed: bool = False  # the kernel's file differs from the recorded one (run with allow_changed)
    skipped: str | None = None  # top-level statements of the kernel's file that loading it left out
    from_history: bool = False
    trace_equal: bool | None = None
    trace_diff: TraceDiff | None = None
    recorded_error: str | None = None
    replay_error: str | None = None
    same_error: bool | None = None
    tensors: list[TensorDiff] = field(default_factory=list)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    record_s: float | None = None  # the recorded launch's interpreted run
    run_s: float | None = None  # the replayed kernel run alone
    duration_s: float = 0.0  # the whole replay: reading, rebuilding, resolving, running, comparing
    replay_id: int | None = None
    unknown_reads: list[str] = field(default_factory=list)  # sparse snapshots: elements read but not recorded
    derived_trace: bool = False  # ``tilelens trace``: this replay's access trace was stored on the launch

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["exit_code"] = self.exit_code
        return _json_safe(data)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value) if isinstance(value, (str, bytes)) else str(value)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value
