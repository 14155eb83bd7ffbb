"""The first out-of-bounds events of a launch, kept on its row so that ``show`` need not read the trace.

``show`` lists up to ten out-of-bounds events by default. Finding them meant reading the Parquet trace (and
importing pyarrow, numpy and, through pyarrow, pandas: most of the command's time). The recorder stores the
first :data:`SAMPLE_EVENTS` of them, in trace order, with the total, in ``launches.oob_sample`` (schema 0013);
``show`` answers from it whenever it holds what was asked for, and reads the trace otherwise.

Invariant: ``events`` are exactly the first ``min(total, SAMPLE_EVENTS)`` rows that
:func:`tilelens.store.files.lanes.oob_rows` returns for the launch's trace, with the fields
:func:`tilelens.store.read.results.oob_event_of` reads, and ``total`` is its count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

SAMPLE_EVENTS = 10
FIELDS = ("pid_x", "pid_y", "pid_z", "event", "op", "arg", "line", "lanes", "active", "oob", "stray")


def oob_sample(trace: pa.Table | None) -> dict[str, Any] | None:
    """Record time: the sample for ``trace``; None when there is no trace or no out-of-bounds event."""
    if trace is None or trace.num_rows == 0:
        return None
    from tilelens.store.files import lanes  # pyarrow and numpy: the recorder has them loaded already

    found = lanes.oob_rows(trace, SAMPLE_EVENTS)
    if not found.total:
        return None
    events = []
    for row in found.rows:
        event: dict[str, Any] = {name: row.get(name) for name in FIELDS}
        offsets = row["oob_offsets"]
        event["oob_offsets"] = [int(offsets[0]), int(offsets[1])] if offsets is not None else None
        events.append(event)
    return {"total": int(found.total), "events": events}


def sampled_events(sample: Any, first: int) -> tuple[list[dict[str, Any]], int] | None:
    """The first ``first`` events and the total, when ``sample`` (decoded JSON) holds them; else None."""
    if not isinstance(sample, dict) or not isinstance(sample.get("events"), list):
        return None
    events, total = sample["events"], int(sample.get("total") or 0)
    if first > len(events) and total > len(events):
        return None  # more were asked for than were kept: the trace has them
    return events[: max(first, 0)], total
