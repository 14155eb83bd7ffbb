"""Running one launch through Triton's interpreter and turning it into a ``LaunchRecord``.

The order matters: identity is known before the interpreter is entered (cache_key poisoning), snapshots are
taken before the kernel can write, spans come from the interpreter's own host copies (a pre-run hook), and
the user's exception is re-raised unchanged after the record is built.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilelens.core.engine.access import AccessCollector
from tilelens.core.engine.launch_context import GluonLaunch
from tilelens.core.engine.lines import LineCapture
from tilelens.core.engine.writelog import WriteLog
from tilelens.core.interpreted.touched import TouchedSnapshots, defer, forget_untouched
from tilelens.core.kernel.arguments import (
    Param,
    bind,
    capture_after,
    describe_arguments,
    host_spans,
    jsonable,
    resolve_grid,
)
from tilelens.core.kernel.failures import describe_failure
from tilelens.core.patches import LAUNCH_LOCK, attribute_replaced, launch_patches
from tilelens.records import ArgumentRecord, KernelIdentity, LaunchRecord, utcnow


@dataclass
class LaunchMeta:
    """What the layers above the kernel decided for this launch."""

    role: str = "launch"
    tuning_key: str | None = None
    autotune: dict[str, Any] | None = None
    heuristics: dict[str, Any] = field(default_factory=dict)


def run_interpreted(
    interpreted: Any,
    identity: KernelIdentity,
    params: list[Param],
    user_hooks: list[Any],
    args: tuple[Any, ...],
    grid: Any,
    kwargs: dict[str, Any],
    meta: LaunchMeta,
    snapshots: bool = True,
    gluon: bool = False,
    writes: WriteLog | None = None,
    early: Callable[[list[ArgumentRecord]], None] | None = None,
    lines: bool = False,
) -> tuple[Any, LaunchRecord, BaseException | None]:
    """Interpret one launch; return (kernel result, record, the exception it raised or None).

    ``snapshots=False`` leaves the tensor copies out of the record, for callers that keep the tensors
    themselves (replay compares the rebuilt arguments directly). ``gluon`` runs a Gluon kernel in the
    simulator (``tilelens.core.engine.gluon``) with the launch's ``num_warps``. ``writes`` receives the old bytes of every
    lane the launch writes (:mod:`tilelens.core.engine.writelog`). ``early`` gets the argument records, with their
    before-snapshots, before the kernel runs (the recorder starts storing them then: ``Recording.store_early``).
    ``lines`` captures the kernel function's executed lines into ``record.lines`` (:mod:`tilelens.core.engine.lines`;
    not for Gluon launches, which the simulator runs).
    """
    with LAUNCH_LOCK:
        bound, options = bind(params, args, kwargs)
        started = utcnow()
        t0 = time.perf_counter()
        error: BaseException | None = None
        result = None
        deferred: dict[int, Any] = {}
        arg_records = describe_arguments(params, bound, snapshots, deferred, defer)
        touched = TouchedSnapshots(arg_records, deferred)
        if early is not None:
            early(arg_records)
        if touched.needed and writes is None:  # large tensors: snapshots of what the launch touches
            writes = WriteLog()
        collector = AccessCollector()
        resolved: tuple[int, int, int] = (0, 0, 0)
        engine: dict[str, Any] = {"mode": "program", "fallback": "gluon" if gluon else "not run"}
        capture = LineCapture() if lines and not gluon else None

        def capture_spans(*host_args: Any, **host_kwargs: Any) -> None:
            collector.set_spans(host_spans(params, host_args, host_kwargs))

        try:
            with attribute_replaced(interpreted, "pre_run_hooks", [capture_spans, *user_hooks]):
                resolved = resolve_grid(grid, bound)
                simulated = GluonLaunch(num_warps=int(options.get("num_warps") or 4)) if gluon else None
                with launch_patches(collector, simulated, writes) as ctx:
                    ctx.lines = capture
                    try:
                        result = interpreted.run(*args, grid=resolved, warmup=False, **kwargs)
                    finally:
                        engine = ctx.engine or engine
        except BaseException as exc:  # recorded, then re-raised unchanged by the caller
            error = exc
        duration = time.perf_counter() - t0
        if snapshots:
            capture_after(params, bound, arg_records)
        trace = collector.finish()
        if touched.needed and writes is not None:
            touched.finish(trace, collector.spans, writes, collector.per_arg, collector.summary)
        if snapshots and error is None and trace is not None:
            forget_untouched(arg_records, collector.per_arg, collector.spans.aliased, collector.cross)
        config: dict[str, Any] = {
            "constexprs": {p.name: jsonable(bound.get(p.name)) for p in params if p.constexpr},
            "options": jsonable(options),
            # Which interpreter engine ran the launch: "batched" (the whole grid at once), or "program" with
            # the reason it fell back (tilelens.core.engine.batched).
            "engine": engine,
        }
        if meta.autotune is not None:
            config["autotune"] = meta.autotune
        if meta.heuristics:
            config["heuristics"] = jsonable(meta.heuristics)
        if collector.shared.get("events"):
            config["shared_memory"] = dict(collector.shared)
        if capture is not None and capture.failure is not None:  # the launch then has no line data
            config["line_capture"] = capture.failure
        if collector.spans.aliased:
            config["aliased_args"] = [list(p) for p in collector.spans.aliased]
        if collector.cross:  # out-of-bounds lanes of one argument's events inside another argument's view
            config["cross_args"] = [[a, b, n] for (a, b), n in sorted(collector.cross.items())]
        device = next((a.device for a in arg_records if a.kind == "tensor" and a.device), "cpu")
        record = LaunchRecord(
            kernel=identity,
            grid=resolved,
            args=arg_records,
            status="ok" if error is None else "error",
            error=None if error is None else describe_failure(error),
            backend="interpreter",
            device=device or "cpu",
            role=meta.role,  # type: ignore[arg-type]
            config=config,
            tuning_key=meta.tuning_key,
            summary=collector.summary,
            trace=trace,
            started_at=started,
            duration_s=duration,
            per_arg=collector.per_arg,
            lines=capture.result() if capture is not None else None,
        )
        return result, record, error
