"""Where a compiled recording's launches go: the writer process or the writer thread, and the snapshot pool.

Kept out of ``recorder.py`` so the recording only asks: which writer (:func:`choose_writer`), queue this raw
launch (:func:`submit_raw`), which pinned pool (:func:`snapshot_pool`).

``writer="auto"`` takes the writer process (``tilelens.core.compiled.writer.process``) when every launch is a raw launch
of plain values (``snapshots="none"``) and the run is already begun (a forked child's lazy run is begun by its
first launch, in the child, and keeps the thread). Snapshot launches carry host buffers and CUDA events, which
stay in the program's process: their writer is the thread (``tilelens.core.compiled.writer.thread``).
"""

from __future__ import annotations

import sys
from typing import Any

from tilelens.core.compiled.rows import build_launch
from tilelens.core.compiled.snapshots import SnapshotPolicy


def choose_writer(rec: Any, kind: str) -> Any | None:
    """A started ProcessWriter for ``rec``, or None to keep its thread writer."""
    if kind == "thread" or rec.run_id is None:
        return None
    if kind == "auto" and rec.snapshot_policy.mode != "none":
        return None
    from tilelens.core.compiled.writer.child import RawWriter
    from tilelens.core.compiled.writer.process import ProcessWriter

    history = rec.history

    def apply(report: dict[str, Any]) -> None:
        for launch_id, kernel_name, status, unsnapshotted in report["written"]:
            rec.launch_ids.append(launch_id)
            rec.launches_per_kernel[kernel_name] += 1
            rec.errors += status == "error"
            rec.unsnapshotted += unsnapshotted
        rec.autotune_events += report["events"]
        if rec.on_launch is not None and report["written"]:
            last = report["written"][-1]
            rec.on_launch(_Named(last[1]), last[0])

    try:
        return ProcessWriter(
            history.location.db_url,
            str(history.location.blobs_dir),
            rec.run_id,
            rec.next_seq,
            apply,
            lambda seq: RawWriter(history, rec.run_id, seq),
        )
    except OSError as exc:  # no process could be started: the thread writes instead
        print(f"tilelens: no writer process ({exc}); writing from a thread", file=sys.stderr)
        return None


class _Named:
    """What ``on_launch`` reads of a record (``record.kernel.name``), for launches written by the process."""

    def __init__(self, name: str) -> None:
        self.kernel = self
        self.name = name


def submit_raw(writer: Any, kernel: Any, raw: tuple[Any, ...]) -> Any:
    """Queue a raw launch: to the process as it is, to the thread as a build made on the writer's thread."""
    submit = getattr(writer, "submit_raw", None)
    if submit is not None:
        return submit(kernel, raw)
    identity, params = kernel.identity, kernel.params
    return writer.submit_launch(None, None, lambda: build_launch(identity, params, raw))


def snapshot_pool(policy: SnapshotPolicy, initial_bytes: int, limit: int | None = None) -> Any | None:
    """The recording's pinned pool for device snapshots (at most ``limit`` bytes pinned: the writer's backlog);
    None without snapshots or without CUDA."""
    if policy.mode == "none":
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    from tilelens.core.compiled.pinned_pool import PinnedPool

    return PinnedPool(initial=initial_bytes, limit=limit)
