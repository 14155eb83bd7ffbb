"""Compare access traces event by event, and find which access wrote a differing element.

Trace offsets are relative to each argument's first element, so a replay into freshly allocated memory produces
the very same table when the kernel does the same thing. Tables are compared in blocks (Arrow compares a block
in C); only the first unequal block is unpacked to Python to name the event and the fields that differ.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tilelens.replay.result import TraceDiff, Writer
from tilelens.store.files.traces import lane_mask, lane_offsets

BLOCK_ROWS = 4096
_MASK_FIELDS = ("mask", "oob_mask")


# Tables normalized lately, with their results: a batch of replays compares the same recorded trace (read once
# and kept decoded by the blob store) and often the same replayed one (reused by the encoder) again and again.
# Arrow tables are immutable, and each entry holds its table, so an id is never reused while it is kept.
_NORMALIZED: list[tuple[pa.Table, pa.Table]] = []
NORMALIZED_KEPT = 8


def normalize(table: pa.Table) -> pa.Table:
    """Same logical content, same physical form: dictionary-encoded ``op`` as plain strings, one chunk."""
    for known, done in _NORMALIZED:
        if known is table:
            return done
    done = _normalize(table)
    if table.num_rows <= BLOCK_ROWS:  # small ones only: the kept tables stay small
        _NORMALIZED[:] = [*_NORMALIZED[-(NORMALIZED_KEPT - 1) :], (table, done)]
    return done


def _normalize(table: pa.Table) -> pa.Table:
    if "op" in table.column_names and pa.types.is_dictionary(table.schema.field("op").type):
        i = table.column_names.index("op")
        table = table.set_column(i, "op", table.column("op").cast(pa.string()))
    return table.combine_chunks()


def first_difference(recorded: pa.Table, replayed: pa.Table, arg_names: dict[int, str]) -> TraceDiff | None:
    rec, rep = normalize(recorded), normalize(replayed)
    columns = [c for c in rec.column_names if c in rep.column_names]
    rec, rep = rec.select(columns), rep.select(columns)
    n = min(rec.num_rows, rep.num_rows)
    for start in range(0, n, BLOCK_ROWS):
        length = min(BLOCK_ROWS, n - start)
        a, b = rec.slice(start, length), rep.slice(start, length)
        if a.equals(b):
            continue
        for i, (ra, rb) in enumerate(zip(a.to_pylist(), b.to_pylist())):
            fields = [c for c in columns if ra[c] != rb[c]]
            if fields:
                return _diff(start + i, fields, ra, rb, arg_names)
    if rec.num_rows == rep.num_rows:
        return None
    rows = rec if rec.num_rows > rep.num_rows else rep
    extra = rows.slice(n, 1).to_pylist()[0]
    ctx = _context(extra, arg_names)
    return TraceDiff(
        row=n,
        field="events",
        recorded=f"{rec.num_rows} events",
        replayed=f"{rep.num_rows} events",
        **ctx,
    )


def _diff(
    row: int, fields: list[str], recorded: dict[str, Any], replayed: dict[str, Any], names: dict[int, str]
) -> TraceDiff:
    first = fields[0]
    # The replayed event names the code that runs now, which is what the user can open and edit.
    ctx = _context(replayed, names)
    a, b = _show(first, recorded), _show(first, replayed)
    if first in _MASK_FIELDS:
        lane = _first_differing_lane(first, recorded, replayed)
        if lane is not None:
            b = f"{b}, first differing lane {lane}"
    label = first if len(fields) == 1 else f"{first} (also {', '.join(fields[1:])})"
    return TraceDiff(row=row, field=label, recorded=a, replayed=b, **ctx)


def _context(row: dict[str, Any], names: dict[int, str]) -> dict[str, Any]:
    arg = row.get("arg")
    return {
        "program": (row.get("pid_x"), row.get("pid_y"), row.get("pid_z")),
        "event": row.get("event"),
        "op": row.get("op"),
        "arg": names.get(arg, "no argument") if arg is not None else None,
        "line": row.get("line"),
    }


def _show(name: str, row: dict[str, Any]) -> Any:
    value = row.get(name)
    if name in _MASK_FIELDS:
        if value is None:
            return "all lanes active" if name == "mask" else "no lanes out of bounds"
        return f"{int(_bits(name, row).sum())} lanes set"
    if isinstance(value, list) and len(value) > 8:
        return f"[{', '.join(map(str, value[:8]))}, ... ({len(value)} values)]"
    return value


def _bits(name: str, row: dict[str, Any]) -> np.ndarray:
    shape = tuple(row["shape"])
    value = row.get(name)
    n = int(np.prod(shape)) if shape else 1
    if value is None:
        return np.ones(n, dtype=bool) if name == "mask" else np.zeros(n, dtype=bool)
    return np.unpackbits(np.frombuffer(value, dtype=np.uint8), count=n).astype(bool)


def _first_differing_lane(name: str, a: dict[str, Any], b: dict[str, Any]) -> int | None:
    if a.get("shape") != b.get("shape"):
        return None
    where = np.flatnonzero(_bits(name, a) != _bits(name, b))
    return int(where[0]) if where.size else None


def last_writer(trace: pa.Table, position: int, offset: int) -> Writer | None:
    """The last store or atomic of argument ``position`` whose active lanes covered element ``offset``."""
    table = normalize(trace)
    writes = table.filter(
        pc.and_(pc.equal(table.column("arg"), position), pc.not_equal(table.column("op"), "load"))
    )
    for row in reversed(writes.to_pylist()):
        offsets = lane_offsets(row)
        hit = (offsets == offset) & lane_mask(row)
        if hit.any():
            return Writer(
                program=(row["pid_x"], row["pid_y"], row["pid_z"]),
                event=row["event"],
                op=row["op"],
                line=row["line"],
            )
    return None
