"""The state of one interpreted launch on its thread (``LaunchContext``), and how code finds it.

``tilelens.core.patches`` makes every change to Triton's objects: nothing here changes any. The running
launch's context is ``LOCAL.launch`` (None outside an interpreted launch); the patches
``patches.launch_patches`` installs read it there, so that each thread sees only its own launch.

``LOCAL`` is each thread's interception state, read on every intercepted launch. Its class attributes are every
thread's defaults: a thread that never set one reads the default by a plain lookup
(``getattr(threading.local(), name, default)`` for a name the thread never set raises and catches an
AttributeError inside: about 0.6 µs, paid two or three times per launch of a compiled recording). Invariant:
only ``tilelens.core.patches`` sets these, and it puts back what it changed; the class defaults never change.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tilelens.core.engine import bounds, fastmem
from tilelens.core.engine.access import AccessCollector
from tilelens.core.engine.lines import LineCapture
from tilelens.core.engine.writelog import WriteLog

if TYPE_CHECKING:
    from tilelens.core.engine.batched.state import BatchState


class Patching(Protocol):
    """What a launch asks of the patch module's patcher (``tilelens.core.patches``), which puts back every
    change it made when the launch ends: patches only known once the kernel runs."""

    def set(self, owner: Any, name: str, value: Any) -> None: ...

    def set_item(self, mapping: dict[str, Any], key: str, value: Any) -> None: ...


@dataclass(frozen=True)
class GluonLaunch:
    """Options of a simulated Gluon launch (what compiled Gluon reads from the launch's options)."""

    num_warps: int = 4


class LaunchContext:
    """Per-launch state: the collector receiving accesses and interpreted stand-ins for nested helpers
    (``helpers``: id of the helper's ``JITFunction`` -> (it, its interpreted copy), made by the interpreter)."""

    def __init__(
        self, collector: AccessCollector, patcher: Patching, reads: bounds.RecordedReads | None = None
    ) -> None:
        self.collector = collector
        self.reads = reads  # a replay's recorded out-of-bounds reads, fed back to the same lanes
        self.helpers: dict[int, Any] = {}
        self.patcher = patcher  # for patches only known once the kernel runs (libdevice in its globals)
        self.redirected: set[int] = set()  # ids of the code objects whose libdevice names are redirected
        self.lang_patched: set[int] = set()  # ids of the tl modules the launch's language patching covered
        self.gluon: GluonLaunch | None = None  # set for a simulated Gluon launch
        self.writes: WriteLog | None = None  # when set, every write's old bytes are noted first
        self.views = fastmem.StorageViews()  # typed views of the argument storages (large loads and stores)
        # The grid-batched engine (tilelens.core.engine.batched): the running attempt's state and the patches it
        # re-installs after each helper's language patching; ``engine`` is the launch's outcome for its record.
        self.batch: BatchState | None = None
        self.batch_patcher: Patching | None = None
        self.batch_lang: list[tuple[Any, str, Any]] = []
        self.engine: dict[str, Any] | None = None
        # The kernel function's executed lines (tilelens.core.engine.lines.LineCapture), when the recording
        # asks for coverage; None: not captured.
        self.lines: LineCapture | None = None


class ThreadState(threading.local):
    launch: LaunchContext | None = (
        None  # the ``LaunchContext`` of the interpreted launch running on this thread, if any
    )
    reads: bounds.RecordedReads | None = (
        None  # ``bounds.RecordedReads`` fed back to interpreted launches started here (a CPU replay)
    )
    bench_depth: int = 0  # > 0 inside an autotuner's benchmark of one config (a trial launch)


LOCAL = ThreadState()


def current_launch() -> LaunchContext | None:
    return LOCAL.launch


@contextlib.contextmanager
def recorded_reads(reads: bounds.RecordedReads | None) -> Iterator[None]:
    """Interpreted launches started on this thread inside the block get ``reads`` fed back (a CPU replay)."""
    before = LOCAL.reads
    LOCAL.reads = reads
    try:
        yield
    finally:
        LOCAL.reads = before
