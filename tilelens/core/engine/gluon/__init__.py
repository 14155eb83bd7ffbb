"""A CPU simulator of Gluon kernels (``@gluon.jit``), on top of Triton's interpreter.

Gluon has no interpreter path: ``gluon.jit`` always compiles. But a Gluon layout only says where a value lives
on the GPU, not what it is, so a Gluon kernel computes on the CPU what the Triton interpreter computes for the
same operations. A simulated launch is an ordinary interpreted launch (``InterpretedFunction`` runs the
kernel's Python function program by program) in which Gluon's builtins run with ``GluonSimSemantic``: Gluon's
own semantic over ``GluonSimBuilder``, which forwards every ``tl`` operation to the interpreter builder (so
global loads, stores and atomics reach TileLens's access hooks exactly as Triton's do) and implements Gluon's
operations on numpy values: shared memory (``shared.py``), mbarriers (``barriers.py``), ``warp_specialize``
(``partitions.py``), TMA, cp.async, wgmma and tcgen05 (``nvidia.py``).

Modules: ``semantic`` and ``builder`` (the two objects above), ``language`` (which attributes of Gluon's
modules a launch replaces), ``reductions``, ``descriptors`` and ``executor`` (interpreter functions wrapped
for Gluon launches), ``layouts`` (result layouts, and layouts as recorded values). Every replacement is
installed and removed by ``tilelens.core.patches.gluon_simulation``; nothing here changes Triton itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilelens.core.engine.gluon.state import GluonLaunchState, SharedRecorder


def new_semantic(
    base_builder: Any,
    *,
    num_warps: int,
    record_shared: SharedRecorder | None,
    thread_init: Callable[[], None],
) -> Any:
    """The semantic of one simulated launch (its builder holds the launch's shared memory and partitions)."""
    from tilelens.core.engine.gluon.builder import GluonSimBuilder
    from tilelens.core.engine.gluon.semantic import GluonSimSemantic

    state = GluonLaunchState(num_warps=num_warps, record_shared=record_shared, thread_init=thread_init)
    return GluonSimSemantic(GluonSimBuilder(base_builder, state))
