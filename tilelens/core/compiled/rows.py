"""A compiled launch's ``LaunchRecord``, built from plain facts: on the program's thread, a writer thread or the
writer process alike.

The program's thread of a ``snapshots="none"`` recording keeps only a *raw launch* (:data:`RawLaunch`), a tuple
of immutable plain values read at launch time (no reference to the program's tensors or Triton's objects), so
it can be built into a record anywhere later, including in another process (``tilelens.core.compiled.writer.process``).

Invariant: ``build_launch(identity, params, raw)`` is the record the router would have built at launch time
from the same launch (``tests/unit/test_compiled_capture.py`` checks it field by field).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from tilelens.core.compiled.capture import describe_snapped
from tilelens.core.kernel.arguments import Param, jsonable
from tilelens.records import ArgumentRecord, KernelIdentity, LaunchRecord

# (snapped arguments, resolved grid, error text or None, launch options, context or None, compile metadata,
#  started (seconds since the epoch), duration in seconds, GPU name or None, pytest node id or None).
# context: (best, heuristics, tuning key text); best is None without an autotuner, else (chosen config dict,).
RawLaunch = tuple[Any, ...]


def config_of(
    records: list[ArgumentRecord],
    options: dict[str, Any],
    best: tuple[Any] | None,
    heuristics: dict[str, Any],
    metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    """``launches.config`` of a compiled launch; ``best[0]`` is the chosen config already as a dict."""
    config: dict[str, Any] = {
        "constexprs": {r.name: r.value for r in records if r.kind == "constexpr"},
        "options": jsonable(options),
    }
    if best is not None:
        config["autotune"] = {"chosen": best[0]}
    if heuristics:
        config["heuristics"] = jsonable(heuristics)
    if metadata:
        config["compiled"] = dict(metadata)
    return config


def record_of(
    identity: KernelIdentity,
    resolved: tuple[int, int, int],
    records: list[ArgumentRecord],
    error: str | None,
    options: dict[str, Any],
    context: tuple[Any, ...] | None,
    metadata: dict[str, Any] | None,
    started: Any,
    duration: float,
    gpu_name: str | None,
) -> LaunchRecord:
    best, heuristics, key = context if context is not None else (None, {}, None)
    device = first_device(records)
    if isinstance(started, float):  # seconds since the epoch, as the launch's thread read them
        started = _dt.datetime.fromtimestamp(started, _dt.timezone.utc)
    return LaunchRecord(
        kernel=identity,
        grid=resolved,
        args=records,
        status="ok" if error is None else "error",
        error=error,
        backend="compiled",
        device=device,
        role="launch",
        config=config_of(records, options, best, heuristics, metadata),
        tuning_key=key,
        trace=None,
        started_at=started,
        duration_s=duration,
        gpu_name=gpu_name if device.startswith("cuda") else None,
    )


def first_device(records: list[ArgumentRecord]) -> str:
    return next((a.device for a in records if a.kind == "tensor" and a.device), "cpu") or "cpu"


def build_launch(identity: KernelIdentity, params: list[Param], raw: RawLaunch) -> LaunchRecord:
    snapped, resolved, error, options, context, metadata, started, duration, gpu_name, nodeid = raw
    records = describe_snapped(params, snapped)
    rec = record_of(
        identity, resolved, records, error, options, context, metadata, started, duration, gpu_name
    )
    rec.test_nodeid = nodeid
    return rec
