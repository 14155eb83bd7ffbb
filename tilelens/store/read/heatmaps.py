"""Heatmap data: per tensor argument of one launch, what its access trace did to every element.

The pure data step behind ``tilelens show --heatmap`` and the web app's heatmaps (both render what this
module returns; neither decodes a trace). An argument's elements are laid out on a 2-D grid of cells:

* a 2-D tensor is its rows x columns; a tensor of more dimensions is ``prod(shape[:-1])`` rows of its last
  dimension; a 1-D tensor is folded into rows of ``width`` elements (default: the power of two nearest
  above its square root); a 0-D tensor is one cell;
* elements are in C order of the *logical* tensor, whatever its strides: a lane's element offset (relative to
  the view's first element, as the trace stores it) is mapped back to the logical element at that offset;
* past the last element come up to :data:`BAND_ROWS` rows of *band*: the place of lanes beyond the view's
  end (offset ``extent + k`` is drawn ``k`` cells after the last element), where out-of-bounds and
  masked-off tails show;
* a tensor with more than ``max_cells`` cells is binned: each cell then sums ``bin_rows x bin_cols``
  elements (an integer number of each), so a picture stays a bounded size;
* ``peak`` is what "count" colouring shows: the most accesses (active, in-bounds lanes of any kind) one
  element of the cell received; a binned cell takes the largest of its elements' counts (exact up to
  :data:`DENSE_LIMIT` elements; past that, the cell's mean rounded up, and ``peak_exact`` is False).

Invariants: ``reads + writes + atomics`` over all cells equals the argument's active, in-bounds lanes that
land on one of its elements (the rest are counted in ``unmapped``); every masked-off lane is counted once, in
``masked`` or in ``masked_outside``; every out-of-bounds lane once, in ``oob`` or ``oob_outside``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tilelens.errors import LaunchNotFoundError, UsageError
from tilelens.store.files.lanes import LaneDecoder, column_array, op_kind, string_codes
from tilelens.store.read.results import decode_json
from tilelens.store.sql.readonly import storable_id

if TYPE_CHECKING:
    import pyarrow as pa

    from tilelens.store.read.query import HistoryQuery

BAND_ROWS = 2  # rows of cells past the last element (lanes further out are counted, not drawn)
DEFAULT_MAX_CELLS = 1 << 18  # 512 x 512: a picture of at most a few megapixels
DENSE_LIMIT = 1 << 24  # a binned tensor of up to this many elements keeps per-element counts (128 MB)

# Cell categories, what a picture colours in "access" mode (tilelens.reporters.palette names their colours).
UNTOUCHED, MASKED, READ, WRITE, READ_WRITE, ATOMIC, OOB, BAND = range(8)
CATEGORY_NAMES = ("untouched", "masked off", "read", "written", "read and written", "atomic", "out of bounds",
                  "past the end")  # fmt: skip
KINDS = ("load", "store", "atomic")


@dataclass
class Heatmap:
    """One tensor argument's cells; every array is ``(rows + band_rows, cols)``, row-major."""

    position: int
    name: str
    dtype: str | None
    shape: list[int]
    strides: list[int]
    numel: int
    rows: int  # rows of cells that hold elements
    cols: int
    band_rows: int  # rows of cells past the end (0 when no lane went there)
    elements_per_row: int  # logical elements per row of the 2-D layout (the fold width for 1-D)
    bin_rows: int  # element rows per cell row (1 unless binned)
    bin_cols: int  # element columns per cell column
    inside: np.ndarray  # cell holds at least one element of the tensor
    reads: np.ndarray  # active in-bounds load lanes
    writes: np.ndarray  # active in-bounds store lanes
    atomics: np.ndarray  # active in-bounds atomic lanes
    masked: np.ndarray  # masked-off lanes aimed at the cell
    oob: np.ndarray  # active lanes outside every argument, drawn past the end
    first_row: np.ndarray  # trace row of the first active lane on the cell (else first masked lane), -1 none
    program: np.ndarray  # linear program id (pid_x + gx * (pid_y + gy * pid_z)) of first_row, -1 none
    kind: np.ndarray  # index into KINDS of first_row's op, -1 none
    line: np.ndarray  # kernel source line of first_row, -1 none
    peak: np.ndarray  # most accesses to one element of the cell (see the module's docstring)
    peak_exact: bool = True  # False: a binned tensor past DENSE_LIMIT, peak is the cell's mean rounded up
    oob_outside: int = 0  # out-of-bounds lanes before the first element or past the band
    masked_outside: int = 0  # masked-off lanes before the first element, past the band or in a view's gap
    unmapped: int = (
        0  # active in-bounds lanes on no element of this view (a gap of a strided view, a neighbour)
    )

    @property
    def grid_rows(self) -> int:
        return self.rows + self.band_rows

    def categories(self) -> np.ndarray:
        """Each cell's category (UNTOUCHED .. BAND), the colour of "access" mode; the strongest fact wins."""
        out = np.full(self.inside.shape, UNTOUCHED, dtype=np.int8)
        out[~self.inside] = BAND
        out[self.masked > 0] = MASKED
        out[self.reads > 0] = READ
        out[self.writes > 0] = WRITE
        out[(self.reads > 0) & (self.writes > 0)] = READ_WRITE
        out[self.atomics > 0] = ATOMIC
        out[self.oob > 0] = OOB
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: scalars as they are, every cell array as a flat row-major list."""
        out: dict[str, Any] = {}
        for name, value in vars(self).items():
            out[name] = value.ravel().astype(int).tolist() if isinstance(value, np.ndarray) else value
        out["category"] = self.categories().ravel().astype(int).tolist()
        return out


@dataclass
class LaunchHeatmaps:
    launch_id: int
    grid: tuple[int, int, int]
    kinds: tuple[str, ...] = KINDS
    heatmaps: list[Heatmap] = field(default_factory=list)
    trace: bool = True  # False: the launch has no access trace (every heatmap is empty)

    def as_dict(self) -> dict[str, Any]:
        return {
            "launch_id": self.launch_id,
            "grid": list(self.grid),
            "kinds": list(self.kinds),
            "categories": list(CATEGORY_NAMES),
            "trace": self.trace,
            "heatmaps": [h.as_dict() for h in self.heatmaps],
        }


@dataclass(frozen=True)
class TensorArg:
    position: int
    name: str
    dtype: str | None
    shape: list[int]
    strides: list[int]


def default_width(numel: int) -> int:
    """The fold width of a 1-D tensor: the power of two at or above its square root (1 for 0 or 1 element)."""
    return 1 << max(0, math.ceil(math.log2(math.sqrt(numel)))) if numel > 1 else 1


def layout(shape: Sequence[int], width: int | None) -> tuple[int, int]:
    """(rows, elements per row) of a tensor's 2-D picture."""
    numel = math.prod(shape)
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        w = width or default_width(numel)
        return max(1, -(-numel // w)), w
    return math.prod(shape[:-1]), max(1, shape[-1])


class _Cells:
    """Maps element offsets (relative to the view's first element) to cells of one argument's grid."""

    def __init__(self, arg: TensorArg, width: int | None, max_cells: int) -> None:
        self.numel = math.prod(arg.shape)
        self.extent = 1 + sum((n - 1) * s for n, s in zip(arg.shape, arg.strides)) if self.numel else 0
        self.rows, self.cols = layout(arg.shape, width)
        band_elements = self.rows * self.cols - self.numel + BAND_ROWS * self.cols
        self.band_limit = band_elements  # lanes past the end this far (in elements) are drawn
        side = max(1, math.isqrt(max_cells))
        self.bin_c = max(1, -(-self.cols // side))
        cell_cols = -(-self.cols // self.bin_c)
        self.bin_r = max(1, -(-self.rows // max(1, max_cells // cell_cols)))
        self.cell_cols = cell_cols
        self.cell_rows = -(-self.rows // self.bin_r)
        self.total_rows = -(-(self.rows + BAND_ROWS) // self.bin_r)
        contiguous = all(
            s == math.prod(arg.shape[i + 1 :])
            for i, (n, s) in enumerate(zip(arg.shape, arg.strides))
            if n > 1
        )
        self.lookup: tuple[np.ndarray, np.ndarray] | None = None
        if not contiguous and self.numel:
            offsets = np.zeros(arg.shape, dtype=np.int64)
            for axis, (n, s) in enumerate(zip(arg.shape, arg.strides)):
                index = [1] * len(arg.shape)
                index[axis] = n
                offsets = offsets + np.arange(n, dtype=np.int64).reshape(index) * s
            flat = offsets.ravel()
            order = np.argsort(flat, kind="stable")  # aliased elements (stride 0): the first in C order wins
            self.lookup = (flat[order], order.astype(np.int64))

    def flat(self, offset: np.ndarray) -> np.ndarray:
        """Virtual flat index: the C-order element, ``numel + k`` for ``extent + k``; -1 before the start or
        on no element (a gap); -2 past the band."""
        out = np.full(offset.size, -1, dtype=np.int64)
        inside = (offset >= 0) & (offset < self.extent)
        if self.lookup is None:
            out[inside] = offset[inside]
        elif inside.any():
            values, order = self.lookup
            at = np.searchsorted(values, offset[inside], side="left")
            at_c = np.minimum(at, values.size - 1)
            hit = values[at_c] == offset[inside]
            out[np.flatnonzero(inside)[hit]] = order[at_c[hit]]
        past = offset >= self.extent
        excess = offset[past] - self.extent
        out[past] = np.where(excess < self.band_limit, self.numel + excess, -2)
        return out

    def cell(self, flat: np.ndarray) -> np.ndarray:
        r, c = np.divmod(flat, self.cols)
        out: np.ndarray = (r // self.bin_r) * self.cell_cols + c // self.bin_c
        return out


def heatmaps_of(
    trace: pa.Table | None,
    args: Sequence[TensorArg],
    grid: tuple[int, int, int],
    *,
    width: int | None = None,
    max_cells: int = DEFAULT_MAX_CELLS,
) -> list[Heatmap]:
    """The heatmap of every argument in ``args`` from one launch's trace (None: no trace, empty heatmaps)."""
    if width is not None and width < 1:
        raise UsageError(f"a heatmap width is a positive number of elements, not {width}")
    if max_cells < 1:
        raise UsageError(f"a heatmap needs at least one cell, not {max_cells}")
    maps = {a.position: (a, _Cells(a, width, max_cells)) for a in args}
    acc = {p: _Accumulator(c) for p, (_, c) in maps.items()}
    if trace is not None and trace.num_rows:
        arg = column_array(trace, "arg", np.int64)
        codes, names = string_codes(trace.column("op"))
        kind_of = np.array([KINDS.index(op_kind(str(n))) if op_kind(str(n)) in KINDS else -1 for n in names])
        kinds = kind_of[codes] if kind_of.size else np.zeros(0, dtype=np.int64)
        pid = [column_array(trace, f"pid_{a}", np.int64) for a in "xyz"]
        program = pid[0] + grid[0] * (pid[1] + grid[1] * pid[2])
        line = column_array(trace, "line", np.int64)
        for chunk in LaneDecoder(trace).chunks():
            lane_arg = arg[chunk.row]
            for position in np.unique(lane_arg):
                if int(position) not in maps:
                    continue
                sel = lane_arg == position
                cells = maps[int(position)][1]
                acc[int(position)].add(
                    cells,
                    cells.flat(chunk.offset[sel]),
                    chunk.row[sel],
                    kinds[chunk.row[sel]],
                    chunk.active[sel],
                    chunk.oob[sel],
                )
        for a in acc.values():
            a.finish(program, kinds, line)
    return [acc[p].heatmap(a, c) for p, (a, c) in maps.items()]


class _Accumulator:
    """Per-cell sums of one argument, added to chunk by chunk."""

    def __init__(self, cells: _Cells) -> None:
        n = cells.total_rows * cells.cell_cols
        binned = cells.bin_r > 1 or cells.bin_c > 1
        self.per_element = np.zeros(cells.numel, np.int64) if binned and cells.numel <= DENSE_LIMIT else None
        self.counts = {
            k: np.zeros(n, dtype=np.int64) for k in ("reads", "writes", "atomics", "masked", "oob")
        }
        none = np.iinfo(np.int64).max
        self.first_active = np.full(n, none, dtype=np.int64)
        self.first_masked = np.full(n, none, dtype=np.int64)
        self.first_row = np.full(n, -1, dtype=np.int64)
        self.program = self.kind = self.line = self.first_row
        self.oob_outside = self.masked_outside = self.unmapped = 0

    def add(
        self,
        cells: _Cells,
        flat: np.ndarray,
        row: np.ndarray,
        kind: np.ndarray,
        active: np.ndarray,
        oob: np.ndarray,
    ) -> None:
        n = self.first_row.size
        placed = flat >= 0
        inbounds = active & ~oob
        on_element = placed & (flat < cells.numel)
        self.unmapped += int(np.count_nonzero(inbounds & ~on_element))
        self.oob_outside += int(np.count_nonzero(oob & ~placed))
        self.masked_outside += int(np.count_nonzero(~active & ~placed))
        cell = np.where(placed, cells.cell(np.maximum(flat, 0)), 0)
        for name, keep in (
            ("reads", inbounds & on_element & (kind == 0)),
            ("writes", inbounds & on_element & (kind == 1)),
            ("atomics", inbounds & on_element & (kind == 2)),
            ("masked", ~active & placed),
            ("oob", oob & placed),
        ):
            self.counts[name] += np.bincount(cell[keep], minlength=n)
        if self.per_element is not None:
            self.per_element += np.bincount(flat[inbounds & on_element], minlength=cells.numel)
        first_active = active & placed & (on_element | oob)
        np.minimum.at(self.first_active, cell[first_active], row[first_active])
        np.minimum.at(self.first_masked, cell[~active & placed], row[~active & placed])

    def finish(self, program: np.ndarray, kinds: np.ndarray, line: np.ndarray) -> None:
        none = np.iinfo(np.int64).max
        first = np.where(self.first_active != none, self.first_active, self.first_masked)
        touched = first != none
        self.first_row = np.where(touched, first, -1)
        safe = np.where(touched, first, 0)
        self.program = np.where(touched, program[safe], -1)
        self.kind = np.where(touched, kinds[safe], -1)
        self.line = np.where(touched, line[safe], -1)

    def heatmap(self, arg: TensorArg, cells: _Cells) -> Heatmap:
        total = cells.total_rows * cells.cell_cols
        flat_of_cell = np.arange(total, dtype=np.int64)
        r, c = np.divmod(flat_of_cell, cells.cell_cols)
        first_flat = r * cells.bin_r * cells.cols + c * cells.bin_c  # the cell's top-left element
        inside = first_flat < cells.numel
        drawn = [self.counts[k] for k in ("masked", "oob")]
        used_rows = int(np.flatnonzero((drawn[0] + drawn[1] > 0) | inside).max(initial=-1) // cells.cell_cols)
        band = max(0, used_rows + 1 - cells.cell_rows)
        rows = cells.cell_rows + band
        shape = (rows, cells.cell_cols)

        def grid(a: np.ndarray) -> np.ndarray:
            return a[: rows * cells.cell_cols].reshape(shape)

        total_accesses = self.counts["reads"] + self.counts["writes"] + self.counts["atomics"]
        peak, exact = total_accesses, True
        if self.per_element is not None:  # the largest count of each block of elements
            br, bc = cells.bin_r, cells.bin_c
            padded = np.zeros((cells.total_rows * br, cells.cell_cols * bc), dtype=np.int64)
            full = np.zeros(cells.rows * cells.cols, dtype=np.int64)
            full[: cells.numel] = self.per_element
            padded[: cells.rows, : cells.cols] = full.reshape(cells.rows, cells.cols)
            peak = padded.reshape(cells.total_rows, br, cells.cell_cols, bc).max(axis=(1, 3)).ravel()
        elif cells.bin_r > 1 or cells.bin_c > 1:
            exact = False
            peak = -(-total_accesses // (cells.bin_r * cells.bin_c))

        return Heatmap(
            position=arg.position,
            name=arg.name,
            dtype=arg.dtype,
            shape=list(arg.shape),
            strides=list(arg.strides),
            numel=cells.numel,
            rows=cells.cell_rows,
            cols=cells.cell_cols,
            band_rows=band,
            elements_per_row=cells.cols,
            bin_rows=cells.bin_r,
            bin_cols=cells.bin_c,
            inside=grid(inside),
            reads=grid(self.counts["reads"]),
            writes=grid(self.counts["writes"]),
            atomics=grid(self.counts["atomics"]),
            masked=grid(self.counts["masked"]),
            oob=grid(self.counts["oob"]),
            first_row=grid(self.first_row),
            program=grid(self.program),
            kind=grid(self.kind),
            line=grid(self.line),
            peak=grid(peak),
            peak_exact=exact,
            oob_outside=self.oob_outside,
            masked_outside=self.masked_outside,
            unmapped=self.unmapped,
        )


_ARGS = (
    "SELECT position, name, dtype, shape, strides FROM launch_args "
    "WHERE launch_id = :id AND kind = 'tensor' ORDER BY position"
)


def launch_inputs(
    query: HistoryQuery, launch_id: int
) -> tuple[tuple[int, int, int], list[TensorArg], pa.Table | None]:
    """(grid, tensor arguments, access trace or None) of one launch: what heatmaps are computed from."""
    from tilelens.errors import NoTraceError

    rows = (
        query.reader.execute(
            "SELECT grid_x, grid_y, grid_z FROM launches WHERE id = :id", {"id": launch_id}
        ).rows
        if storable_id(launch_id)
        else []
    )
    if not rows:
        raise LaunchNotFoundError(f"no launch {launch_id} in history {query.reader.label}")
    grid = (int(rows[0][0]), int(rows[0][1]), int(rows[0][2]))
    args = []
    for position, name, dtype, shape, strides in query.reader.execute(_ARGS, {"id": launch_id}).rows:
        shape, strides = decode_json(shape), decode_json(strides)
        if shape is not None and strides is not None and len(shape) == len(strides):
            args.append(
                TensorArg(int(position), str(name), dtype, [int(n) for n in shape], [int(s) for s in strides])
            )
    try:
        trace: pa.Table | None = query.trace(launch_id)
    except NoTraceError:
        trace = None
    return grid, args, trace


def launch_heatmaps(
    query: HistoryQuery, launch_id: int, *, width: int | None = None, max_cells: int = DEFAULT_MAX_CELLS
) -> LaunchHeatmaps:
    """The heatmaps of every tensor argument of one launch of the history ``query`` reads."""
    grid, args, trace = launch_inputs(query, launch_id)
    maps = heatmaps_of(trace, args, grid, width=width, max_cells=max_cells)
    return LaunchHeatmaps(launch_id=launch_id, grid=grid, heatmaps=maps, trace=trace is not None)


Cells = _Cells  # the element-to-cell mapping, for tilelens.store.read.heatmap_events
