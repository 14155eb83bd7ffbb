"""The batched engine's values and per-launch state, and the one switch that picks the engine.

Invariants:

* a handle whose value differs between programs is a :class:`BatchedHandle`: its data has shape
  ``(B, *per_program_shape)``, program ``b`` of the launch (in the stock loop's order) at index ``b``; every
  other handle is the stock interpreter's, with the per-program shape (scalars are shape ``(1,)``, so a
  batched scalar is ``(B, 1)``). numpy's right-aligned broadcasting then lets element-wise methods mix both;
* Triton's own methods (and TileLens's semantic fixes) only ever see plain handles: a batched operand is
  handed to them as a plain ``TensorHandle`` holding the batched data (``plain``), and the result marked
  batched again by the caller, so a check like ``type(h) is TensorHandle`` keeps working;
* anything the engine has not verified raises :class:`Fallback`; the launch then runs program by program.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilelens.core import compat

ENGINE_ENV = "TILELENS_ENGINE"
ENGINES = ("batched", "program")


def engine_mode() -> str:
    """The engine interpreted launches use: ``TILELENS_ENGINE`` (``program`` or ``batched``), default batched.

    Read here and nowhere else; an unknown value means the default.
    """
    value = os.environ.get(ENGINE_ENV, "").strip().lower()
    return value if value in ENGINES else "batched"


class Fallback(Exception):
    """The batched run cannot promise the per-program result; ``reason`` says why (kept in the record)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


TensorHandle = compat.TensorHandle


class BatchedHandle(TensorHandle):  # type: ignore[misc, valid-type]
    """A value that differs between programs: data shape ``(B, *per_program_shape)``."""

    def __bool__(self) -> bool:
        # The stock handle's truth is ``data.all()``, per program; the programs must agree.
        data = np.asarray(self.data)
        per = data.reshape(data.shape[0], -1).all(axis=1)
        if per.all():
            return True
        if not per.any():
            return False
        raise Fallback("divergent control flow")


_new = object.__new__


def _handle(cls: type, data: Any, dtype: Any, attr: Any) -> Any:
    """A handle of class ``cls`` without ``TensorHandle.__post_init__``'s size check: ``data`` and ``dtype``
    come from a handle that passed it (same array, same type), so it would pass again."""
    out: Any = _new(cls)
    out.data = data
    out.dtype = dtype
    out.attr = dict(attr) if attr else {}
    return out


def plain(h: Any) -> Any:
    """``h`` as a stock ``TensorHandle`` (same data, dtype and attributes); other values unchanged."""
    t = type(h)
    if t is BatchedHandle:
        return _handle(TensorHandle, h.data, h.dtype, h.attr)
    if t is list:
        return [plain(x) for x in h]
    if t is tuple:
        return tuple(plain(x) for x in h)
    return h


def mark(h: Any) -> Any:
    """``h`` (a stock handle holding batched data) as a :class:`BatchedHandle`."""
    return _handle(BatchedHandle, h.data, h.dtype, getattr(h, "attr", None))


def has_batched(args: tuple[Any, ...]) -> bool:
    for a in args:
        t = type(a)
        if t is BatchedHandle:
            return True
        if (t is list or t is tuple) and any(type(x) is BatchedHandle for x in a):
            return True
    return False


@dataclass
class BatchState:
    """One batched attempt: the programs of the grid in the stock loop's order (x outermost, z fastest)."""

    grid: tuple[int, int, int]
    programs: list[tuple[int, int, int]] = field(init=False)
    pids: tuple[np.ndarray, np.ndarray, np.ndarray] = field(init=False)
    active: bool = True
    held: int = 0  # lanes of memory accesses the collector holds for this attempt
    # What was built for this state once and serves every attempt with it (``builder.batched_class``).
    built: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        nx, ny, nz = self.grid
        idx = np.arange(nx * ny * nz, dtype=np.int64)
        x, y, z = idx // (ny * nz), (idx // nz) % ny, idx % nz
        self.pids = (x.astype(np.int32), y.astype(np.int32), z.astype(np.int32))
        self.programs = list(zip(x.tolist(), y.tolist(), z.tolist()))

    @property
    def size(self) -> int:
        return len(self.programs)

    def full(self, h: Any) -> np.ndarray:
        """``h``'s data with the program axis, broadcast (a read-only view) where ``h`` is uniform."""
        data = np.asarray(h.data)
        if type(h) is BatchedHandle:
            return data
        return np.broadcast_to(data, (self.size, *data.shape))

    def program_id(self, axis: int) -> Any:
        values = self.pids[axis]
        if self.grid[axis] == 1:  # the same for every program: stays uniform
            return TensorHandle(np.array([0], dtype=np.int32), compat.tl.int32)
        return BatchedHandle(values.reshape(-1, 1).copy(), compat.tl.int32)

    def slice(self, h: Any, b: int) -> Any:
        """Program ``b``'s own handle (stock shape) of ``h``."""
        if type(h) is BatchedHandle:
            return plain(BatchedHandle(h.data[b], h.dtype))
        return h


# The states of the last few grids, with what was built for them (``BatchState.built``). Launches never
# overlap (``interpreter.LAUNCH_LOCK``), so one state serves one attempt at a time.
_STATES: OrderedDict[tuple[int, int, int], BatchState] = OrderedDict()
_STATES_KEPT = 8


def state_for(grid: tuple[int, int, int]) -> BatchState:
    """A fresh attempt's state for ``grid``: the kept one, reset (active, nothing held), or a new one.

    The programs and program ids depend on the grid alone; keeping the state keeps what was built for it (the
    batched builder class), so repeated launches of a grid build nothing.
    """
    state = _STATES.get(grid)
    if state is None:
        state = _STATES[grid] = BatchState(grid)
        while len(_STATES) > _STATES_KEPT:
            _STATES.popitem(last=False)
    else:
        _STATES.move_to_end(grid)
    state.active = True
    state.held = 0
    return state
