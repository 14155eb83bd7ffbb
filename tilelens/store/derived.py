"""Writes beyond one launch at a time: batches from a background writer, and traces derived after the fact.

Both are ``History`` methods (``write_launches``, ``attach_trace``) kept here so that ``history.py`` stays one
module of readable size; they follow its write order (blobs first, then one transaction).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, cast

from sqlalchemy import Table, insert, update
from sqlalchemy import exc as sa_exc

from tilelens.errors import LaunchNotFoundError, UsageError
from tilelens.records import LaunchRecord
from tilelens.store import database
from tilelens.store.blobs import BlobRef
from tilelens.store.models import Launch, LaunchArg
from tilelens.store.oobsample import oob_sample
from tilelens.store.traces import TRACE_WRITE_OPTIONS

if TYPE_CHECKING:
    from tilelens.records import AccessSummary
    from tilelens.store.history import History


def _summary(summary: AccessSummary | None) -> dict[str, int] | None:
    return None if summary is None else {k: int(v) for k, v in dataclasses.asdict(summary).items()}


def write_batch(history: History, run_id: int, recs: list[LaunchRecord]) -> list[int]:
    """Write several launches in one transaction (blobs first); their ids, in order.

    For a background writer that drains many small launches at once: one commit instead of one per launch.
    Should the batch collide with a taken seq (a forked child), each launch is written on its own instead,
    which resolves the seq as :meth:`write_launch` does. All or nothing per transaction, as there.
    """
    if len(recs) == 1:
        return [history.write_launch(run_id, recs[0])]
    prepared = [history._launch_rows(run_id, rec) for rec in recs]
    try:
        with database.write_session(history.engine) as s:
            refs: dict[str, BlobRef] = {}
            for batch_refs, _launch, _args in prepared:
                refs.update(batch_refs)
            database.hold_blob_rows(s)  # first: gc then waits for this transaction (store.gc)
            history._register_blobs(s, refs.values())
            in_batch: dict[tuple[str, str, str], int] = {}  # a kernel new to this batch: inserted once
            for rec, (_refs, launch, _args) in zip(recs, prepared):
                k = rec.kernel
                key = (k.module, k.qualname, k.source_sha256)
                kernel_id = in_batch.get(key)
                if kernel_id is None:
                    kernel_id = in_batch[key] = history._kernel_id(s, k)
                launch["kernel_id"] = kernel_id
            # Two statements for the whole batch (many-row INSERTs; ids back in parameter order), not two
            # per launch: statement overhead is most of a small launch's write.
            table = cast(Table, Launch.__table__)
            returning = insert(table).returning(table.c.id, sort_by_parameter_order=True)
            ids = [int(i) for i in s.execute(returning, [launch for _r, launch, _a in prepared]).scalars()]
            arg_rows = [
                {**a, "launch_id": launch_id}
                for launch_id, (_r, _l, args) in zip(ids, prepared)
                for a in args
            ]
            if arg_rows:
                s.execute(insert(cast(Table, LaunchArg.__table__)), arg_rows)
    except sa_exc.IntegrityError as exc:
        if not database.violates_unique(exc, "launches", ("run_id", "seq")):
            raise
        return [history.write_launch(run_id, rec) for rec in recs]
    for rec, (_refs, launch, _args) in zip(recs, prepared):
        history._kernel_ids[(rec.kernel.module, rec.kernel.qualname, rec.kernel.source_sha256)] = launch[
            "kernel_id"
        ]
    return ids


def attach_trace(history: History, launch_id: int, rec: LaunchRecord) -> None:
    """Store ``rec``'s access trace and access counts on launch ``launch_id`` as a derived trace.

    For launches recorded compiled (no trace): ``tilelens trace`` interprets the before-snapshot and keeps
    what the interpreter saw here, marked ``trace_derived``. Blob first, then one transaction.
    """
    if rec.trace is None:
        raise UsageError(f"launch {launch_id}: no access trace to attach")
    ref = history.blobs.store_table(rec.trace, "trace", **TRACE_WRITE_OPTIONS)
    s_ = rec.summary
    per_arg = getattr(rec, "per_arg", None) or {}
    values = {
        **s_.as_columns(),
        "unattributed": _summary(per_arg.get(-1)),
        "trace_blob": ref.sha256,
        "trace_rows": ref.rows,
        "trace_bytes": ref.size,
        "trace_derived": True,
        "oob_sample": oob_sample(rec.trace) if s_.oob_lanes else None,
    }
    from tilelens.store.lanes import distinct_elements  # pyarrow and numpy: only when a trace is derived

    distinct = distinct_elements(rec.trace)  # what `show` reads instead of decoding the trace
    with database.write_session(history.engine) as s:
        database.hold_blob_rows(s)  # first: gc then waits for this transaction (store.gc)
        history._register_blobs(s, [ref])
        result = s.execute(update(Launch).where(Launch.id == launch_id).values(**values))
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise LaunchNotFoundError(f"no launch {launch_id} in history {history.label}")
        for position, summary in per_arg.items():
            if position >= 0:
                s.execute(
                    update(LaunchArg)
                    .where(LaunchArg.launch_id == launch_id, LaunchArg.position == position)
                    .values(access=_summary(summary), distinct_elements=distinct.get(position, 0))
                )
