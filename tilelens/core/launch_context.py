"""The state of one interpreted launch on its thread (``LaunchContext``), and how code finds it.

Split from ``interpreter.py``, which makes every change to Triton's objects: nothing here changes any. The
running launch's context is ``thread_state.LOCAL.launch`` (None outside an interpreted launch); the patches
``interpreter.launch_patches`` installs read it there, so that each thread sees only its own launch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tilelens.core import bounds, fastmem
from tilelens.core.access import AccessCollector
from tilelens.core.thread_state import LOCAL as _local
from tilelens.core.writelog import WriteLog

if TYPE_CHECKING:
    from tilelens.core.batched.state import BatchState
    from tilelens.core.interpreter import _Patcher


@dataclass(frozen=True)
class GluonLaunch:
    """Options of a simulated Gluon launch (what compiled Gluon reads from the launch's options)."""

    num_warps: int = 4


class LaunchContext:
    """Per-launch state: the collector receiving accesses and interpreted stand-ins for nested helpers
    (``helpers``: id of the helper's ``JITFunction`` -> (it, its interpreted copy), made by the interpreter)."""

    def __init__(
        self, collector: AccessCollector, patcher: _Patcher, reads: bounds.RecordedReads | None = None
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
        # The grid-batched engine (tilelens.core.batched): the running attempt's state and the patches it
        # re-installs after each helper's language patching; ``engine`` is the launch's outcome for its record.
        self.batch: BatchState | None = None
        self.batch_patcher: _Patcher | None = None
        self.batch_lang: list[tuple[Any, str, Any]] = []
        self.engine: dict[str, Any] | None = None


def current_launch() -> LaunchContext | None:
    return _local.launch


@contextlib.contextmanager
def recorded_reads(reads: bounds.RecordedReads | None) -> Iterator[None]:
    """Interpreted launches started on this thread inside the block get ``reads`` fed back (a CPU replay)."""
    before = _local.reads
    _local.reads = reads
    try:
        yield
    finally:
        _local.reads = before
