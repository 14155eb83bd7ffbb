"""A recorded launch as rows ready to insert, its blobs stored first; and the rows every write shares.

``History`` writes a launch on its own, in batches and as a derived trace, and the writer process writes
templated launches (``templated_rows``): all of them build rows here, so a launch written any way is the same
row, column by column. Invariant: :func:`launch_rows` stores every blob its rows name before it returns (durable
together, ``BlobStore.batch``); the caller then registers them (:func:`register_blobs`) in the transaction that
inserts the rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, cast

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from tilelens.records import AccessSummary, KernelIdentity, LaunchRecord, utcnow
from tilelens.store.files.blobs import BlobRef, BlobStore
from tilelens.store.files.jsonvalues import to_json
from tilelens.store.files.oobsample import oob_sample
from tilelens.store.files.tracestore import TraceStore
from tilelens.store.sql import database
from tilelens.store.sql.models import Blob, Kernel

Rows = tuple[dict[str, BlobRef], dict[str, Any], list[dict[str, Any]]]  # (blobs by sha256, launch, arguments)
KernelKey = tuple[str, str, str]  # module, qualname, source sha256


def launch_rows(
    blobs: BlobStore, traces: TraceStore, run_id: int, rec: LaunchRecord, bundles: Bundles | None = None
) -> Rows:
    """A launch's blobs (stored now, durable together when this returns) and its rows, ready to insert."""
    with blobs.batch():
        return _rows_and_blobs(blobs, traces, run_id, rec, bundles or Bundles())


class Bundles:
    """Kernel bundles already stored, by their text (a recording sends one text object per kernel): each is
    stored once per history object, not once per launch."""

    def __init__(self) -> None:
        self.refs: dict[str, BlobRef] = {}

    def store(self, blobs: BlobStore, text: str) -> BlobRef:
        ref = self.refs.get(text)
        if ref is None or not blobs.exists(ref.sha256):
            import pyarrow as pa

            ref = blobs.store_table(pa.table({"bundle": [text]}), "bundle")
            if len(self.refs) > 4096:
                self.refs.clear()
            self.refs[text] = ref
        return ref


def _rows_and_blobs(
    blobs: BlobStore, traces: TraceStore, run_id: int, rec: LaunchRecord, bundles: Bundles
) -> Rows:
    refs: dict[str, BlobRef] = {}

    def keep(ref: BlobRef) -> str:
        refs.setdefault(ref.sha256, ref)
        return ref.sha256

    bundle = None if rec.kernel.bundle is None else keep(bundles.store(blobs, rec.kernel.bundle))

    per_arg = getattr(rec, "per_arg", None) or {}
    trace, distinct = traces.store(rec.trace)  # first: a reused trace is confirmed on disk
    if trace is not None:
        keep(trace)
    # Plain rows through SQLAlchemy Core: ORM objects cost more than the SQL itself at this size, and this runs
    # once per recorded launch.
    args: list[dict[str, Any]] = []
    for a in rec.args:
        touched = getattr(a, "touched", None)
        if touched is not None:  # a sparse snapshot: the touched elements only (core.interpreted.touched)
            before, after = _store_sparse(blobs, a, touched, keep)
            tensor = None
        else:
            before = keep(blobs.store_tensor(a.before)) if a.before is not None else None
            after = keep(blobs.store_tensor(a.after)) if a.after is not None else before
            tensor = a.before if a.before is not None else a.after
        args.append(
            {
                "position": a.position,
                "name": a.name,
                "kind": a.kind,
                "dtype": a.dtype if a.dtype is not None or tensor is None else str(tensor.dtype),
                "shape": ints(a.shape if a.shape is not None or tensor is None else tensor.shape),
                "strides": ints(a.strides if a.strides is not None or tensor is None else tensor.stride()),
                "storage_offset": a.storage_offset
                if a.storage_offset is not None or tensor is None
                else tensor.storage_offset(),
                "storage_group": a.storage_group,
                "storage_bytes": a.storage_bytes,
                "device": a.device,
                "value": to_json(a.value),
                "value_type": getattr(a, "value_type", None),
                "access": summary(per_arg.get(a.position)),
                "distinct_elements": (
                    distinct.get(a.position, 0) if distinct is not None and a.position in per_arg else None
                ),
                "before_blob": before,
                "after_blob": after,
                "snapshot_elements": None if touched is None else int(touched.numel()),
            }
        )

    s_ = rec.summary
    grid = tuple(rec.grid) + (1,) * (3 - len(rec.grid))
    launch = {
        "run_id": run_id,
        "seq": rec.seq,
        "role": rec.role,
        "status": rec.status,
        "error": rec.error,
        "backend": rec.backend,
        "device": rec.device,
        "grid_x": int(grid[0]),
        "grid_y": int(grid[1]),
        "grid_z": int(grid[2]),
        "config": to_json(dict(rec.config)),
        "tuning_key": rec.tuning_key,
        "cache_key": rec.kernel.cache_key,
        "kernel_file_sha256": rec.kernel.file_sha256,
        **s_.as_columns(),
        "unattributed": summary(per_arg.get(-1)),
        "trace_blob": trace.sha256 if trace else None,
        "test_nodeid": rec.test_nodeid,
        "trace_rows": trace.rows if trace else None,
        "trace_bytes": trace.size if trace else None,
        "gpu_name": getattr(rec, "gpu_name", None),
        "bundle_blob": bundle,
        "executed_lines": getattr(rec, "lines", None),
        "oob_sample": oob_sample(rec.trace) if s_.oob_lanes else None,
        "started_at": rec.started_at,
        "duration_s": float(rec.duration_s),
        "created_at": utcnow(),
    }
    return refs, launch, args


def _store_sparse(
    blobs: BlobStore, a: Any, touched: Any, keep: Callable[[BlobRef], str]
) -> tuple[str | None, str | None]:
    """Blobs of a sparse snapshot's before and after (after = before when the launch changed none)."""
    from tilelens.store.files.sparse import for_argument

    if a.before is None:
        return None, None
    before = keep(blobs.store_sparse(for_argument(a, touched.numpy(), a.before)))
    if a.after is None:
        return before, before
    return before, keep(blobs.store_sparse(for_argument(a, touched.numpy(), a.after)))


def blob_rows(refs: Iterable[BlobRef]) -> list[dict[str, Any]]:
    now = utcnow()
    return [
        {"sha256": r.sha256, "kind": r.kind, "size": r.size, "rows": r.rows, "created_at": now} for r in refs
    ]


def register_blobs(s: Session, refs: Iterable[BlobRef]) -> None:
    """The ``blobs`` rows of blobs already on disk (a row per sha256; one that exists is kept)."""
    database.insert_ignore(s, cast(Table, Blob.__table__), blob_rows(refs), keys=("sha256",))


class KernelIds:
    """Kernel row ids by (module, qualname, source sha256), learnt from committed writes only: kernel rows are
    never changed or deleted, so an id seen in a committed write stays right."""

    def __init__(self) -> None:
        self.known: dict[KernelKey, int] = {}

    @staticmethod
    def key(k: KernelIdentity) -> KernelKey:
        return (k.module, k.qualname, k.source_sha256)

    def get(self, k: KernelIdentity) -> int | None:
        return self.known.get(self.key(k))

    def learn(self, k: KernelIdentity, kernel_id: int) -> None:
        """After the commit that wrote (or found) ``kernel_id``."""
        self.known[self.key(k)] = kernel_id

    def id_in(self, s: Session, k: KernelIdentity) -> int:
        """The kernel's row id, inserted in ``s`` when it is new."""
        known = self.get(k)
        return known if known is not None else _insert_kernel(s, k)


def _insert_kernel(s: Session, k: KernelIdentity) -> int:
    row = {
        "module": k.module,
        "qualname": k.qualname,
        "file": k.file,
        "def_line": int(k.def_line),
        "source_sha256": k.source_sha256,
        "cache_key": k.cache_key,
        "source": k.source,
        "created_at": utcnow(),
    }
    keys = ("module", "qualname", "source_sha256")
    database.insert_ignore(s, cast(Table, Kernel.__table__), [row], keys=keys)
    return s.execute(
        select(Kernel.id).where(
            Kernel.module == k.module, Kernel.qualname == k.qualname, Kernel.source_sha256 == k.source_sha256
        )
    ).scalar_one()


_SUMMARY_FIELDS = tuple(f.name for f in dataclasses.fields(AccessSummary))


def summary(value: AccessSummary | None) -> dict[str, int] | None:
    """An access summary as its JSON column (the fields by name, without ``asdict``'s deep copy: this runs per
    argument)."""
    return None if value is None else {k: int(getattr(value, k)) for k in _SUMMARY_FIELDS}


def ints(values: Any) -> list[int] | None:
    return None if values is None else [int(v) for v in values]
