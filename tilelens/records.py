"""Plain records that flow from capture to the store.

The recorder builds these and the store persists them; neither side imports the other. Keeping the contract
in dataclasses (not ORM objects) lets the recorder stay free of SQL and lets tests build records by hand.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    import pyarrow as pa
    import torch

# -- the vocabulary: every status and outcome TileLens stores, defined here only ---------------------------
# The store checks values against these tuples, the CLI offers them as filter choices, and the migrations'
# views compare against the same words.

ArgKind = Literal["tensor", "scalar", "constexpr", "none", "other"]
#: A launch: it returned, or it raised (``error`` keeps the message).
LaunchStatus = Literal["ok", "error"]
#: What a launch was: the program's own, or one config the autotuner tried (``autotune="all"``).
LaunchRole = Literal["launch", "autotune-trial"]
#: Where a launch ran: Triton's CPU interpreter, or compiled on its device (``backend="compiled"`` recordings,
#: replays on a GPU).
Backend = Literal["interpreter", "compiled"]
#: A run: ``running`` until it ends; then ``ok``, ``failed`` (the program failed or exited non-zero),
#: ``interrupted`` (Ctrl-C) or ``terminated`` (SIGTERM/SIGHUP); ``lost`` when its process died without saying
#: how it ended (SIGKILL, ``os._exit``, a crash: see tilelens.store.sql.liveness).
RunStatus = Literal["running", "ok", "failed", "interrupted", "terminated", "lost"]
#: A replay: outputs (and trace) as recorded, not as recorded, or the launch could not be replayed as asked;
#: ``unknown-read``: the kernel read elements a sparse snapshot does not hold (an edited kernel), so its outputs
#: cannot be judged.
ReplayOutcome = Literal["match", "mismatch", "error", "unknown-read"]

ARG_KINDS: tuple[ArgKind, ...] = get_args(ArgKind)
LAUNCH_STATUSES: tuple[LaunchStatus, ...] = get_args(LaunchStatus)
LAUNCH_ROLES: tuple[LaunchRole, ...] = get_args(LaunchRole)
BACKENDS: tuple[Backend, ...] = get_args(Backend)
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
#: How a run's own process can finish it: every run status but ``running`` and ``lost``.
FINISHED_RUN_STATUSES: tuple[RunStatus, ...] = tuple(s for s in RUN_STATUSES if s not in ("running", "lost"))
REPLAY_OUTCOMES: tuple[ReplayOutcome, ...] = get_args(ReplayOutcome)
#: The statuses and outcomes that report a problem (front ends show them as such).
PROBLEMS: frozenset[str] = frozenset(
    {"error", "failed", "interrupted", "terminated", "lost", "mismatch", "unknown-read"}
)


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


@dataclass(frozen=True)
class KernelIdentity:
    """Who a kernel is, independent of any process: enough to find it again and to notice that it changed."""

    module: str
    qualname: str
    file: str
    def_line: int
    source: str
    source_sha256: str
    cache_key: str | None
    # sha256 of the whole file at record time: replay runs that file only while it is byte-identical (or when
    # told to run changed code). None when the file could not be read (``<string>``, a deleted file).
    file_sha256: str | None = None
    # What reproduces the kernel without its file (``tilelens.core.kernel.bundle``: canonical JSON text of its
    # and its jit callees' sources and the globals they read); stored as a blob with each launch.
    bundle: str | None = None

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}"


@dataclass
class ArgumentRecord:
    """One kernel parameter as it was bound at launch.

    For tensors, ``before``/``after`` hold host copies of the argument view (same dtype, shape, strides and
    storage offset); ``after`` is None when the launch did not change the tensor. Arguments with the same
    ``storage_group`` shared one storage at record time; ``storage_offset`` is in elements of that storage.

    A sparse snapshot (:mod:`tilelens.core.interpreted.touched`) sets ``touched``: the positions, in the view's span, of the
    elements the launch read or wrote (int64, sorted, unique); ``before``/``after`` then hold those elements'
    values only (1-D, one per position), ``after`` None again when none of them changed.
    """

    position: int
    name: str
    kind: ArgKind
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    strides: tuple[int, ...] | None = None
    storage_offset: int | None = None
    storage_group: int | None = None
    device: str | None = None
    value: Any = None  # JSON-able value for scalars / constexprs / other
    before: torch.Tensor | None = None
    after: torch.Tensor | None = None
    storage_bytes: int | None = None  # size of the whole storage behind the view (its allocation)
    value_type: str | None = None  # scalars/constexprs: "int", "float", "bool" (+ ":fp32" when annotated)
    touched: torch.Tensor | None = None  # sparse snapshot: span positions of before/after's values, else None


@dataclass
class AccessSummary:
    """Per-launch counts over the whole access trace (also stored per argument in ``per_arg``)."""

    loads: int = 0
    stores: int = 0
    atomics: int = 0
    load_lanes: int = 0
    store_lanes: int = 0
    atomic_lanes: int = 0
    bytes_loaded: int = 0
    bytes_stored: int = 0
    oob_lanes: int = 0  # active lanes outside the view of their event's argument, all ops
    events: int = 0
    lanes: int = 0  # total lanes of all events, active or masked off
    oob_load_lanes: int = 0  # oob_lanes of loads
    oob_store_lanes: int = 0  # oob_lanes of stores and atomics
    dropped_lanes: int = 0  # store/atomic lanes outside every argument's storage: never written

    @property
    def active_lanes(self) -> int:
        return self.load_lanes + self.store_lanes + self.atomic_lanes

    def as_columns(self) -> dict[str, int]:
        """The counts by field name: each is a column of ``launches`` of the same name."""
        return dict(self.__dict__)


@dataclass
class LaunchRecord:
    """Everything TileLens knows about one launch; written by one call of ``History.write_launch``."""

    kernel: KernelIdentity
    grid: tuple[int, int, int]
    args: list[ArgumentRecord]
    status: LaunchStatus = "ok"
    error: str | None = None
    backend: Backend = "interpreter"
    device: str = "cpu"
    role: LaunchRole = "launch"
    config: dict[str, Any] = field(default_factory=dict)
    tuning_key: str | None = None
    summary: AccessSummary = field(default_factory=AccessSummary)
    per_arg: dict[int, AccessSummary] = field(default_factory=dict)  # by parameter position; -1: no argument
    trace: pa.Table | None = None  # access trace, see tilelens.store.files.traces.TRACE_SCHEMA
    started_at: _dt.datetime = field(default_factory=utcnow)
    duration_s: float = 0.0
    seq: int = 0  # order within its run, assigned by the recorder
    test_nodeid: str | None = None  # the pytest test running when it launched (tilelens.core.session)
    gpu_name: str | None = None  # compiled launches on a GPU: the device's name
    # The kernel function's executed source lines (absolute in its file, sorted), captured by interpreted
    # launches of a coverage recording (tilelens.core.engine.lines); None: not captured.
    lines: list[int] | None = None


@dataclass
class AutotuneEvent:
    """One tuning decision of an autotuner: what it considered and what it chose."""

    kernel: KernelIdentity
    tuning_key: str
    configs: list[dict[str, Any]]
    chosen: dict[str, Any]
    timings: list[list[float] | None] | None = None  # None when timings were dummies
    cache_hit: bool = False
    created_at: _dt.datetime = field(default_factory=utcnow)


@dataclass
class RunInfo:
    """One recording session: a ``tilelens record`` invocation or a ``tilelens.record()`` block."""

    argv: list[str]
    cwd: str
    host: str
    versions: dict[str, str]
    tag: str | None = None
    started_at: _dt.datetime = field(default_factory=utcnow)
    parent_run_id: int | None = None  # the run of the process that started this one
