"""Which heatmap cells each memory event, or each program, of a launch touched: the web page's stepper and
program highlight.

Cells are those of :mod:`tilelens.store.read.heatmaps` for the same ``width`` and ``max_cells`` (so the page
can light them on the canvases it drew), and only active lanes count: in-bounds ones on their element's cell,
out-of-bounds ones on their cell past the end (masked-off lanes touch nothing). A page of events is bounded
twice, by :data:`MAX_EVENTS` events and by :data:`MAX_CELLS` cells (but holds at least one event), and says
where the next page starts; a program's cells are at most one per cell of each heatmap.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from tilelens.errors import UsageError
from tilelens.store.files.lanes import DEFAULT_CHUNK_LANES, LaneChunk, LaneDecoder, column_array
from tilelens.store.read.heatmaps import DEFAULT_MAX_CELLS, Cells, launch_inputs

if TYPE_CHECKING:
    from tilelens.store.read.query import HistoryQuery

MAX_EVENTS = 200  # events per page at most
MAX_CELLS = 1 << 16  # cells per page at most, all events together


def _linear(trace: Any, grid: tuple[int, int, int]) -> np.ndarray:
    pid = [column_array(trace, f"pid_{a}", np.int64) for a in "xyz"]
    out: np.ndarray = pid[0] + grid[0] * (pid[1] + grid[1] * pid[2])
    return out


def _decoded(decoder: LaneDecoder, start: int, stop: int) -> Iterator[LaneChunk]:
    """Lanes of rows ``start .. stop - 1``, a bounded number at a time (a single larger row stays whole)."""
    ends = np.cumsum(decoder.lanes)
    while start < stop:
        done = int(ends[start - 1]) if start else 0
        end = int(np.searchsorted(ends, done + DEFAULT_CHUNK_LANES, side="right"))
        end = min(stop, max(end, start + 1))
        yield decoder.decode(start, end)
        start = end


def _cells_by_row(chunk: LaneChunk, arg: np.ndarray, maps: dict[int, Cells]) -> dict[int, np.ndarray]:
    """Per trace row of ``chunk``: the distinct cells its active, placed lanes touched (ascending)."""
    out: dict[int, np.ndarray] = {}
    lane_arg = arg[chunk.row]
    for position, cells in maps.items():
        sel = (lane_arg == position) & chunk.active
        if not sel.any():
            continue
        flat = cells.flat(chunk.offset[sel])
        placed = flat >= 0
        rows, cell = chunk.row[sel][placed], cells.cell(flat[placed])
        pairs = np.unique(np.stack([rows, cell]), axis=1)
        for row in np.unique(pairs[0]):
            out[int(row)] = pairs[1][pairs[0] == row]
    return out


def _setup(
    query: HistoryQuery, launch_id: int, width: int | None, max_cells: int
) -> tuple[tuple[int, int, int], dict[int, Cells], Any]:
    grid, args, trace = launch_inputs(query, launch_id)
    maps = {a.position: Cells(a, width, max_cells) for a in args}
    return grid, maps, trace


def launch_events(
    query: HistoryQuery,
    launch_id: int,
    *,
    start: int = 0,
    limit: int = MAX_EVENTS,
    width: int | None = None,
    max_cells: int = DEFAULT_MAX_CELLS,
) -> dict[str, Any]:
    """One page of a launch's memory events in trace order, from ``start``, JSON-ready."""
    if start < 0 or not 0 < limit <= MAX_EVENTS:
        raise UsageError(
            f"events start at 0 or later and come {MAX_EVENTS} at most a page, not {start}, {limit}"
        )
    grid, maps, trace = _setup(query, launch_id, width, max_cells)
    total = trace.num_rows if trace is not None else 0
    out: dict[str, Any] = {"launch_id": launch_id, "grid": list(grid), "count": total, "start": start}
    events: list[dict[str, Any]] = []
    stop = min(total, start + limit)
    if trace is not None and start < stop:
        decoder = LaneDecoder(trace)
        arg = column_array(trace, "arg", np.int64)
        program = _linear(trace, grid)
        cols = {k: column_array(trace, k, np.int64) for k in ("line", "lanes", "active", "oob")}
        ops = trace.column("op").to_pylist()[start:stop]
        found: dict[int, np.ndarray] = {}
        for chunk in _decoded(decoder, start, stop):
            found.update(_cells_by_row(chunk, arg, maps))
        shown = 0
        for row in range(start, stop):
            cells = found.get(row, np.zeros(0, dtype=np.int64))
            if events and shown + cells.size > MAX_CELLS:
                break
            shown += cells.size
            p = int(program[row])
            events.append(
                {
                    "index": row,
                    "program": p,
                    "pid": [p % grid[0], p // grid[0] % grid[1], p // (grid[0] * grid[1])],
                    "op": ops[row - start],
                    "arg": int(arg[row]),
                    **{k: int(v[row]) for k, v in cols.items()},
                    "cells": cells.astype(int).tolist(),
                }
            )
    out["events"] = events
    after = start + len(events)
    out["next"] = after if after < total else None
    return out


def program_cells(
    query: HistoryQuery,
    launch_id: int,
    program: int,
    *,
    width: int | None = None,
    max_cells: int = DEFAULT_MAX_CELLS,
) -> dict[str, Any]:
    """The cells of each heatmap one program (linear id) touched, its events and source lines, JSON-ready."""
    grid, maps, trace = _setup(query, launch_id, width, max_cells)
    programs = grid[0] * grid[1] * grid[2]
    if not 0 <= program < programs:
        raise UsageError(f"launch {launch_id} has programs 0 to {programs - 1}, not {program}")
    touched: dict[int, set[int]] = {p: set() for p in maps}
    rows = np.zeros(0, dtype=np.int64)
    lines: list[int] = []
    if trace is not None and trace.num_rows:
        rows = np.flatnonzero(_linear(trace, grid) == program)
        arg = column_array(trace, "arg", np.int64)
        lines = sorted({int(v) for v in column_array(trace, "line", np.int64)[rows]})
        # Rows of one program are consecutive in an interpreted trace: decode each run of them.
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        decoder = LaneDecoder(trace)
        for run in np.split(rows, breaks) if rows.size else []:
            for chunk in _decoded(decoder, int(run[0]), int(run[-1]) + 1):
                for row, cells in _cells_by_row(chunk, arg, maps).items():
                    touched[int(arg[row])].update(cells.tolist())
    return {
        "launch_id": launch_id,
        "program": program,
        "pid": [program % grid[0], program // grid[0] % grid[1], program // (grid[0] * grid[1])],
        "events": int(rows.size),
        "lines": lines,
        "heatmaps": [{"position": p, "cells": sorted(c)} for p, c in touched.items()],
    }
