"""What one simulated Gluon launch keeps between operations: launch options, shared memory, partitions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from tilelens.core.engine.gluon.barriers import Barrier, BarrierError
from tilelens.core.engine.gluon.partitions import Scheduler
from tilelens.core.engine.gluon.shared import SharedMemory, SharedView

# (op, shared byte addresses, element bytes, program): how shared-memory traffic reaches the access trace.
SharedRecorder = Callable[[str, np.ndarray, int, tuple[int, int, int]], None]


@dataclass
class GluonLaunchState:
    num_warps: int = 4
    num_ctas: int = 1
    record_shared: SharedRecorder | None = None
    thread_init: Callable[[], None] = lambda: None
    memory: SharedMemory | None = None
    scheduler: Scheduler | None = None
    tensor_memory: dict[int, Any] = field(default_factory=dict)

    def shared(self, program: tuple[int, int, int]) -> SharedMemory:
        """The program's shared memory; a new program starts with an empty one (addresses from 0)."""
        if self.memory is None or self.memory.program != program:
            self.memory = SharedMemory(program)
        return self.memory

    def trace(self, op: str, view: SharedView, program: tuple[int, int, int]) -> None:
        if self.record_shared is not None and view.array.size and view.alloc.space == "shared":
            self.record_shared(op, view.addresses(), view.array.itemsize, program)

    def current_num_warps(self) -> int:
        if self.scheduler is not None and self.scheduler.current is not None:
            return self.scheduler.current.num_warps
        return self.num_warps

    # -- mbarriers ----------------------------------------------------------------------------------------

    def barrier(self, view: SharedView, program: tuple[int, int, int]) -> Barrier:
        found = self.shared(program).barriers.get(view.address)
        if found is None:
            raise BarrierError(f"mbarrier at shared address {view.address} is used before mbarrier.init")
        return cast("Barrier", found)

    def init_barrier(self, view: SharedView, count: int, program: tuple[int, int, int]) -> None:
        self.shared(program).barriers[view.address] = Barrier(count, count)

    def invalidate_barrier(self, view: SharedView, program: tuple[int, int, int]) -> None:
        self.shared(program).barriers.pop(view.address, None)

    def wait(self, ready: Callable[[], bool], what: str) -> None:
        if ready():
            return
        if self.scheduler is None:
            raise BarrierError(f"{what} never completes: nothing else can arrive on it (deadlock)")
        self.scheduler.wait_until(ready, what)
