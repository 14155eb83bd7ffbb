"""A launch's access trace as flat per-event arrays, the form every check works on.

One entry per trace row (a memory event of one program): the program as one number, the event's index within
its program, its kind of access, argument, source line and lane counts. Lanes are decoded later, and only for
the rows a check needs (:meth:`tilelens.store.files.lanes.LaneDecoder.chunks_of`): most of a large trace is
loads of arguments no program writes, which can race with nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tilelens.store.files.lanes import LaneDecoder, column_array, string_codes

LOAD, STORE, ATOMIC = 0, 1, 2
KIND_NAMES = ("load", "store", "atomic")


@dataclass
class Events:
    """Per-event columns of one trace; ``program`` numbers programs ``x + gx * (y + gy * z)``."""

    trace: pa.Table
    grid: tuple[int, int, int]
    program: np.ndarray
    event: np.ndarray
    kind: np.ndarray  # LOAD, STORE or ATOMIC
    op: np.ndarray  # index into ``op_names``
    op_names: list[str]
    arg: np.ndarray
    line: np.ndarray
    active: np.ndarray
    oob: np.ndarray
    stray: np.ndarray

    @classmethod
    def of(cls, trace: pa.Table, grid: tuple[int, int, int]) -> Events:
        pid = [column_array(trace, name, np.int64) for name in ("pid_x", "pid_y", "pid_z")]
        # The recorded grid, widened by any program beyond it (a hand-made trace): numbers stay distinct.
        dims = tuple(max(int(g), int(p.max()) + 1 if p.size else 1) for g, p in zip(grid, pid))
        gx, gy, gz = dims
        op, op_names = string_codes(trace.column("op"))
        kinds = np.array(
            [
                ATOMIC if name.startswith("atomic") else STORE if name == "store" else LOAD
                for name in op_names
            ],
            dtype=np.int8,
        )
        return cls(
            trace=trace,
            grid=(gx, gy, gz),
            program=pid[0] + gx * (pid[1] + gy * pid[2]),
            event=column_array(trace, "event", np.int64),
            kind=kinds[op] if kinds.size else np.zeros(0, dtype=np.int8),
            op=op,
            op_names=op_names,
            arg=column_array(trace, "arg", np.int64),
            line=column_array(trace, "line", np.int64),
            active=column_array(trace, "active", np.int64),
            oob=column_array(trace, "oob", np.int64),
            stray=(
                column_array(trace, "stray", np.int64)
                if "stray" in trace.column_names  # traces from before stray lanes were told apart
                else np.zeros(trace.num_rows, dtype=np.int64)
            ),
        )

    @property
    def count(self) -> int:
        return int(self.program.size)

    def is_op(self, name: str) -> np.ndarray:
        """Which events are the operation ``name`` (``atomic_cas``, ``store``...)."""
        if name not in self.op_names:
            return np.zeros(self.count, dtype=bool)
        return self.op == self.op_names.index(name)

    def pid(self, program: np.ndarray) -> np.ndarray:
        """Program numbers back as (n, 3) program ids."""
        gx, gy, _ = self.grid
        return np.stack([program % gx, (program // gx) % gy, program // (gx * gy)], axis=1)

    def decoder(self) -> LaneDecoder:
        return LaneDecoder(self.trace)
