"""Replay one recorded launch (or many) and judge it against the record.

The recorded config is applied as it was chosen: the innermost kernel runs with the recorded meta-parameters and
launch options and the recorded grid, so neither an autotuner nor a heuristic gets to decide again (they might
decide differently today, and then the replay would test something else than the record).

Every replay that got as far as a known launch leaves exactly one ``replays`` row, whatever its outcome; nothing
else is written (``tilelens.replay.derive`` stores a derived access trace itself, through ``on_record``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch

from tilelens.core import session
from tilelens.core.engine.launch_context import recorded_reads
from tilelens.core.kernel.arguments import span_copy
from tilelens.core.patches import compiled_mode
from tilelens.errors import StateError, UsageError
from tilelens.records import LaunchRecord
from tilelens.replay import oobreads
from tilelens.replay.compare import Tolerance, compare_span, default_tolerance
from tilelens.replay.rebuild import RebuiltArgs, decode_options, rebuild_arguments
from tilelens.replay.resolve import KernelResolver, ResolvedKernel
from tilelens.replay.result import ReplayFailure, ReplayResult, TensorDiff
from tilelens.replay.traces import first_difference, last_writer
from tilelens.replay.unknown import unknown_reads
from tilelens.store import BlobError, History
from tilelens.store.read.launches import LaunchSpec, load_launch


def check_tolerances(atol: float | None, rtol: float | None) -> None:
    """A tolerance is a finite number >= 0 (a negative one would fail every comparison, NaN pass none)."""
    for name, value in (("atol", atol), ("rtol", rtol)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"{name} must be a finite number >= 0, not {value!r}")


def replay_launch(
    history: History,
    launch_id: int,
    *,
    device: str = "cpu",
    allow_changed: bool = False,
    from_history: bool = False,
    trust_source: bool = False,
    atol: float | None = None,
    rtol: float | None = None,
    store: bool = True,
    resolver: KernelResolver | None = None,
    on_record: Callable[[LaunchSpec, LaunchRecord], None] | None = None,
) -> ReplayResult:
    """Replay launch ``launch_id`` of ``history`` on ``device`` ("cpu" or "cuda[:N]") and store the outcome.

    On the CPU the kernel runs in Triton's interpreter, recorded again, and must reproduce every output bit
    and every access event (``atol``/``rtol`` relax the outputs to tolerances). On CUDA it runs compiled and
    outputs must agree within dtype-aware tolerances (see ``tilelens.replay.compare``). A kernel whose source
    changed since the record is refused (``refusal="source-changed"``, or ``"file-changed"`` for the rest of its
    file) unless ``allow_changed``; ``from_history`` runs the recorded source
    instead of today's and, since that executes code read from the database, needs ``trust_source``.

    Raises :class:`LaunchNotFoundError` for an unknown id and :class:`UsageError` for a device that is not
    here (a replay that never started stores nothing); every other problem is an ``error`` result.
    """
    if from_history and not trust_source:
        raise UsageError(
            "from_history runs kernel source read from the history database; pass trust_source=True to allow it"
        )
    check_tolerances(atol, rtol)
    if session.active() is not None:
        raise StateError("TileLens cannot replay inside a tilelens.record() block; replay after it ends")
    started = time.perf_counter()
    dev = parse_device(device)  # a replay that cannot start raises and stores nothing
    spec = load_launch(history, launch_id)
    result = ReplayResult(
        launch_id=spec.id,
        kernel=spec.kernel.name,
        device=device,
        backend="compiled" if device.startswith("cuda") else "interpreter",
        outcome="error",
        message="",
        from_history=from_history,
        recorded_error=spec.error,
        atol=atol,
        rtol=rtol,
        record_s=spec.duration_s,
    )
    result.device = str(dev)
    result.backend = "interpreter" if dev.type == "cpu" else "compiled"
    try:
        resolver = resolver or KernelResolver(_data_folders(history), allow_changed=allow_changed)
        bundle = _bundle(history, spec) if from_history else None
        resolved = resolver.resolve(spec.kernel, from_history=from_history, bundle=bundle)
        result.source_changed = resolved.source_changed
        result.file_changed = resolved.file_changed
        result.skipped = resolved.skipped
        if resolved.source_changed and not allow_changed:
            raise ReplayFailure(
                f"source changed: {spec.kernel.name} ({resolved.origin} {spec.kernel.file}) hashes to "
                f"{resolved.source_sha256[:12]}, the recorded source to {spec.kernel.source_sha256[:12]}",
                reason="source-changed",
            )
        options = decode_options(spec)
        recorded_trace = _trace(history, spec)
        if dev.type == "cpu":
            args = rebuild_arguments(history.blobs, spec, dev)
            record = _replay_cpu(spec, resolved, args, options, recorded_trace, result)
            if on_record is not None and record is not None:
                on_record(spec, record)
        else:
            # Out-of-bounds lanes read recorded bytes placed around the rebuilt tensors (see oobreads).
            layout = oobreads.gpu_layout(recorded_trace, spec)
            problem = layout.problem(spec.id)
            if problem is not None:
                raise ReplayFailure(problem)
            margin = oobreads.GPU_MARGIN_BYTES if layout.pieces or _has_oob(recorded_trace) else 0
            args = rebuild_arguments(history.blobs, spec, dev, layout.pieces, margin)
            _replay_cuda(spec, resolved, args, options, dev, result)
        _conclude(spec, resolved, result)
    except ReplayFailure as failure:
        result.outcome = "error"
        result.message = str(failure)
        result.refusal = failure.reason
    except Exception as exc:  # a bug or an environment problem: still one answer, and one row, per launch
        result.outcome = "error"
        result.message = f"launch {spec.id}: replay failed unexpectedly: {_message(exc)}"
    result.duration_s = time.perf_counter() - started
    if store:
        result.replay_id = history.write_replay(
            spec.id,
            outcome=result.outcome,
            device=result.device,
            backend=result.backend,
            max_abs_err=result.max_abs_err,
            max_rel_err=result.max_rel_err,
            trace_equal=result.trace_equal,
            message=result.message,
            duration_s=result.duration_s,
            versions=_versions(),
        )
    return result


def replay_launches(
    history: History,
    launch_ids: Iterable[int],
    *,
    on_result: Callable[[ReplayResult], None] | None = None,
    **options: Any,
) -> list[ReplayResult]:
    """Replay several launches, loading and tracing each kernel version once; options as ``replay_launch``."""
    resolver = options.pop("resolver", None) or KernelResolver(
        _data_folders(history), allow_changed=bool(options.get("allow_changed", False))
    )
    results = []
    for launch_id in launch_ids:
        result = replay_launch(history, launch_id, resolver=resolver, **options)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _bundle(history: History, spec: LaunchSpec) -> dict[str, Any] | None:
    """The launch's recorded kernel bundle (``tilelens.core.kernel.bundle``), None when it keeps none."""
    if spec.bundle_blob is None:
        return None
    import json

    try:
        text = history.blobs.get_table(spec.bundle_blob).column("bundle")[0].as_py()
        loaded: dict[str, Any] = json.loads(text)
    except (BlobError, KeyError, IndexError, ValueError) as exc:
        raise ReplayFailure(f"launch {spec.id}: its kernel bundle cannot be read ({exc})") from None
    return loaded


def _data_folders(history: History) -> tuple[Path, ...]:
    """Folders that hold the history's data, never code: replay refuses to load a kernel from them."""
    return (history.location.blobs_dir,)


def parse_device(text: str) -> torch.device:
    """``cpu`` or an existing ``cuda[:N]``; anything else is a :class:`UsageError` naming what is wrong."""
    try:
        dev = torch.device(text)
    except (RuntimeError, ValueError):
        raise UsageError(f"unknown device {text!r}; use cpu or cuda[:N]") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        raise UsageError(f"device {text!r} is not supported; use cpu or cuda[:N]")
    if not torch.cuda.is_available():
        raise UsageError(
            f"{text} requested but no CUDA device is available here (torch.cuda.is_available() is False)"
        )
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        raise UsageError(f"{text} requested but this machine has {count} CUDA device(s)")
    return torch.device("cuda", index)


# -- running --------------------------------------------------------------------------------------------------


def _replay_cpu(
    spec: LaunchSpec,
    resolved: ResolvedKernel,
    args: RebuiltArgs,
    options: dict[str, Any],
    recorded_trace: pa.Table | None,
    result: ReplayResult,
) -> LaunchRecord | None:
    """Interpret the launch and compare; returns the replay's own record (its access trace), if any.

    A launch recorded compiled is compared under the tolerances of a CUDA replay: the interpreter does not
    compute bit for bit what the GPU computed."""
    traced = resolved.traced()
    traced.records.clear()
    error: BaseException | None = None
    reads = oobreads.cpu_reads(recorded_trace)
    t0 = time.perf_counter()
    try:
        with recorded_reads(reads):
            traced[spec.grid](**args.kwargs, **options)
    except Exception as exc:  # the record keeps it; judged against the recorded status below
        error = exc
    result.run_s = time.perf_counter() - t0
    record = traced.records[-1] if traced.records else None
    traced.records.clear()
    result.replay_error = record.error if record is not None else _message(error)
    names = {a.position: a.name for a in spec.args}
    if record is not None:
        result.unknown_reads = [u.describe() for u in unknown_reads(record.trace, args.tensors)]
    if recorded_trace is not None and record is not None and record.trace is not None:
        result.trace_diff = first_difference(recorded_trace, record.trace, names)
        result.trace_equal = result.trace_diff is None
    override = _override(result)
    for rt in args.tensors:
        tolerance = None
        if override is not None:
            tolerance = _tolerance(rt.expected, override, "")
        elif spec.backend == "compiled":
            tolerance = _tolerance(rt.expected, (None, None), spec.kernel.source)
        diff = _compare(rt, tolerance)
        if (
            not diff.equal
            and diff.first_offset is not None
            and record is not None
            and record.trace is not None
        ):
            diff.written_by = last_writer(record.trace, rt.spec.position, diff.first_offset)
        result.tensors.append(diff)
    return record


def _replay_cuda(
    spec: LaunchSpec,
    resolved: ResolvedKernel,
    args: RebuiltArgs,
    options: dict[str, Any],
    dev: torch.device,
    result: ReplayResult,
) -> None:
    jit = resolved.compiled()
    error: BaseException | None = None
    t0 = time.perf_counter()
    try:
        with torch.cuda.device(dev), compiled_mode():
            jit[spec.grid](**args.kwargs, **options)
            torch.cuda.synchronize(dev)
    except Exception as exc:  # compile or launch failure: judged against the recorded status below
        error = exc
    result.run_s = time.perf_counter() - t0
    result.replay_error = _message(error)
    override = _override(result)
    for rt in args.tensors:
        tolerance = _tolerance(rt.expected, override or (None, None), spec.kernel.source)
        result.tensors.append(_compare(rt, tolerance))


def _override(result: ReplayResult) -> tuple[float | None, float | None] | None:
    if result.atol is None and result.rtol is None:
        return None
    return (result.atol, result.rtol)


def _tolerance(expected: torch.Tensor, override: tuple[float | None, float | None], source: str) -> Tolerance:
    default = default_tolerance(expected.dtype, expected, source)
    atol, rtol = override
    return Tolerance(default.atol if atol is None else atol, default.rtol if rtol is None else rtol)


def _compare(rt: Any, tolerance: Tolerance | None) -> TensorDiff:
    replayed = span_copy(rt.view)
    shape, strides = rt.spec.shape or (), rt.spec.strides or ()
    diff = compare_span(rt.spec.name, rt.spec.position, rt.expected, replayed, shape, strides, tolerance)
    diff.sparse = rt.known is not None
    if tolerance is not None:
        diff.atol, diff.rtol = tolerance.atol, tolerance.rtol
    return diff


def _has_oob(trace: pa.Table | None) -> bool:
    if trace is None or trace.num_rows == 0 or "oob" not in trace.column_names:
        return False
    import pyarrow.compute as pc

    return bool(pc.max(trace.column("oob")).as_py() or 0)


def _trace(history: History, spec: LaunchSpec) -> pa.Table | None:
    if spec.trace_blob is None:
        return None
    try:
        return history.blobs.get_table(spec.trace_blob)
    except BlobError as exc:
        raise ReplayFailure(f"launch {spec.id}: access trace: {exc}") from None


# -- judging --------------------------------------------------------------------------------------------------


def _conclude(spec: LaunchSpec, resolved: ResolvedKernel, result: ReplayResult) -> None:
    errs = [d.max_abs_err for d in result.tensors if d.max_abs_err is not None]
    rels = [d.max_rel_err for d in result.tensors if d.max_rel_err is not None]
    result.max_abs_err = max(errs) if errs else None
    result.max_rel_err = max(rels) if rels else None
    prefix = ""
    if resolved.source_changed:
        prefix = (
            f"source changed (recorded {spec.kernel.source_sha256[:12]}, now {resolved.source_sha256[:12]}); "
        )
    elif resolved.origin == "history":
        prefix = "recorded source; "
    elif resolved.file_changed:
        prefix = f"kernel file changed since the record ({spec.kernel.file}); "
    # What loading the kernel's file left out (a script's top-level statements), said after every outcome.
    suffix = f"; {resolved.skipped}" if resolved.skipped else ""
    if result.backend == "compiled" and any(d.sparse for d in result.tensors):
        suffix += (
            "; sparse snapshot: elements the recorded launch did not touch were rebuilt as zeros, and a "
            "compiled replay cannot tell whether the kernel read them (replay on the cpu to check)"
        )
    where = f"launch {spec.id} ({spec.kernel.name}) on {result.device}"
    if spec.status == "error":
        result.outcome = "error"
        result.same_error = result.replay_error == spec.error
        if result.replay_error is None:
            how = "the replay succeeded"
        elif result.same_error:
            how = "the replay failed with the same error"
        else:
            how = f"the replay failed with a different error: {result.replay_error}"
        result.message = f"{prefix}{where} was recorded failing ({spec.error}); {how}{suffix}"
        return
    if result.unknown_reads:
        result.outcome = "unknown-read"
        result.headline = f"{prefix}{where}"
        result.details = list(result.unknown_reads)
        result.message = (
            f"{result.headline}: read elements its sparse snapshot does not hold (the record keeps only the "
            "elements the recorded launch touched; they were rebuilt as zeros), outputs not judged: "
            + "; ".join(result.unknown_reads)
            + suffix
        )
        return
    if result.replay_error is not None and resolved.load_failed:
        # The kernel needed what a statement of its file's slice would have made: the load failed, not the kernel.
        result.outcome = "error"
        result.message = (
            f"{prefix}{where}: the replay raised {result.replay_error}, and loading {spec.kernel.file} could not "
            "run what the kernel needs: " + "; ".join(resolved.load_failed) + suffix
        )
        return
    problems = []
    if result.replay_error is not None:
        problems.append(f"the recorded launch succeeded, the replay raised {result.replay_error}")
    problems += [d.describe() for d in result.tensors if not d.equal]
    if result.trace_diff is not None:
        problems.append(result.trace_diff.describe())
    if problems:
        result.outcome = "mismatch"
        result.headline = f"{prefix}{where}"
        result.details = problems + ([resolved.skipped] if resolved.skipped else [])
        result.message = f"{result.headline}: " + "; ".join(problems) + suffix
        return
    result.outcome = "match"
    n = len(result.tensors)
    if result.backend == "interpreter" and result.atol is None and result.rtol is None:
        outputs = f"{n} tensor{'s' * (n != 1)} bit-identical"
    else:
        outputs = f"{n} tensor{'s' * (n != 1)} within tolerance"
        if result.max_abs_err is not None:
            outputs += f" (max abs err {result.max_abs_err:.3g})"
    trace = {True: ", access trace identical", False: "", None: ""}[result.trace_equal]
    result.message = f"{prefix}{where}: {outputs}{trace}{suffix}"


def _message(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    return f"{type(exc).__name__}: {str(exc) or type(exc).__name__}"


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    from tilelens.version import versions

    return versions()
