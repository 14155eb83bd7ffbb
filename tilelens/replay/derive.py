"""Access traces on demand: interpret a compiled launch from its before-snapshot and keep what it did.

A compiled recording (``backend="compiled"``) stores no access trace. ``derive_traces`` replays each launch on
the CPU in Triton's interpreter with the recorded config and grid (the replay engine, unchanged), stores the
replay's access trace and access counts on the same launch (``launches.trace_derived``), and compares the
interpreted outputs with the compiled after-snapshot under the tolerances of a CUDA replay: every derived trace
is also a fidelity check, stored as a ``replays`` row like any replay.

A launch without a before-snapshot cannot be interpreted: it gets an ``error`` result saying so (and a replay
row), nothing else. A launch that already has a trace is left alone unless ``force`` is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tilelens.records import LaunchRecord
from tilelens.replay.engine import replay_launch
from tilelens.replay.resolve import KernelResolver
from tilelens.replay.result import ReplayResult
from tilelens.store import History
from tilelens.store.read.launches import LaunchSpec, load_launch


def derive_trace(
    history: History,
    launch_id: int,
    *,
    force: bool = False,
    resolver: KernelResolver | None = None,
    **options: Any,
) -> ReplayResult:
    """Derive and store launch ``launch_id``'s access trace; options as ``replay_launch`` (device is the CPU).

    Returns the replay's result; ``derived_trace`` says whether a trace was stored. A launch that has a trace
    already (recorded or derived) gets a ``match`` result without running unless ``force``.
    """
    options.pop("device", None)
    if not force:
        spec = load_launch(history, launch_id)
        if spec.trace_blob is not None:
            return _already(spec)
    stored: list[bool] = []

    def keep(spec: LaunchSpec, record: LaunchRecord) -> None:
        if record.trace is not None:
            history.attach_trace(spec.id, record)
            stored.append(True)

    result = replay_launch(history, launch_id, device="cpu", resolver=resolver, on_record=keep, **options)
    result.derived_trace = bool(stored)
    if stored:
        result.message = f"access trace derived and stored; {result.message}"
    return result


def derive_traces(
    history: History,
    launch_ids: Iterable[int],
    *,
    on_result: Callable[[ReplayResult], None] | None = None,
    **options: Any,
) -> list[ReplayResult]:
    """``derive_trace`` for several launches, resolving each kernel version once."""
    resolver = options.pop("resolver", None) or KernelResolver(
        (history.location.blobs_dir,), allow_changed=bool(options.get("allow_changed", False))
    )
    results = []
    for launch_id in launch_ids:
        result = derive_trace(history, launch_id, resolver=resolver, **options)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _already(spec: LaunchSpec) -> ReplayResult:
    return ReplayResult(
        launch_id=spec.id,
        kernel=spec.kernel.name,
        device="cpu",
        backend="interpreter",
        outcome="match",
        message=f"launch {spec.id} ({spec.kernel.name}) already has an access trace (--force derives it again)",
    )
