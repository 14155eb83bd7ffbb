"""Recording with kernels run compiled on their device (``backend="compiled"``).

The user's own kernel objects run as they would without TileLens: ``JITFunction.run`` compiles and launches,
``Autotuner.run`` benchmarks with Triton's ``do_bench`` and keeps its cache (and disk cache) exactly as it would,
``Heuristics.run`` computes its values. Interception (``tilelens.core.patches.interception_patches``, with
benchmark launches marked) routes each of those calls through :class:`CompiledRouter`, which only watches:

* an autotuner's call is framed, so the launch it makes gets the tuning key and the chosen config, and a fresh
  tuning becomes an ``AutotuneEvent`` with Triton's real timings for every config; a heuristics layer's call
  is framed, so the launch records which meta-parameters it computed (both in ``compiled_tuning``);
* a ``JITFunction`` launch is recorded: identity, grid, arguments, config, launch options, what the compiled
  kernel says about itself (``compat.compile_metadata``), device and GPU name, and snapshots as the
  :class:`~tilelens.core.compiled.snapshots.SnapshotPolicy` decides. No access trace: ``tilelens trace`` derives one
  later from the before-snapshot. Benchmark launches run unrecorded.

The record goes to the recording's background writer (``tilelens.core.compiled.writer.thread``); the launch returns at once.
A templated launch's tensor metadata is read by the native accessor when ``tilelens.core.native`` chooses it,
else in Python (the same values). The launch itself goes through ``runner`` (``compat.run_compiled``); tests
without a GPU pass a stand-in.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilelens.core import compat, native, session
from tilelens.core.compiled.capture import snap_planned
from tilelens.core.compiled.frames import Frame, GridProbe, RouterLocal
from tilelens.core.compiled.routed import RoutedKernel
from tilelens.core.compiled.rows import first_device, record_of
from tilelens.core.compiled.snapshots import (
    BacklogFull,
    PendingSnapshots,
    SnapshotPolicy,
    copy_spans,
    record_event,
)
from tilelens.core.compiled.templates import Templates, body_of, capture, slots_of
from tilelens.core.compiled.tuning import TunerPlan, TuningFrames
from tilelens.core.engine.launch_context import LOCAL as _THREAD
from tilelens.core.kernel.arguments import config_dict, describe_arguments, resolve_grid
from tilelens.core.kernel.failures import describe_failure
from tilelens.records import ArgumentRecord, LaunchRecord

Runner = Callable[[Any, tuple[Any, ...], Any, dict[str, Any]], Any]
_NO_HEURISTICS: dict[str, Any] = {}  # shared by launches without heuristics: read, never changed


@dataclass
class CompiledRouter(TuningFrames):
    """Routes a compiled recording's launches; ``sink`` has ``submit_launch``/``submit_event``."""

    sink: Any
    policy: SnapshotPolicy = field(default_factory=SnapshotPolicy)
    runner: Runner = compat.run_compiled
    _kernels: dict[int, RoutedKernel] = field(default_factory=dict)
    _local: RouterLocal = field(default_factory=RouterLocal)
    _gpu_names: dict[str, str | None] = field(default_factory=dict)
    _metadata_cache: dict[int, tuple[Any, dict[str, Any]]] = field(default_factory=dict)
    _config_cache: dict[int, tuple[Any, dict[str, Any]]] = field(default_factory=dict)
    _key_cache: dict[Any, str] = field(default_factory=dict)
    _numbers: Any = field(default_factory=lambda: itertools.count(1))
    _originals: dict[type, Any] = field(default_factory=dict)
    # The recording's PinnedPool for snapshots of device tensors (None: fresh pinned tensors).
    pool: Any = None
    # Where raw launches go when set (the writer process's ``submit_raw``); else ``sink.submit_raw``.
    submit: Any = None
    # The writer process's ``submit_flat``/``submit_template`` when it takes templated launches (set by
    # :meth:`use_templates`); None: every launch is a raw launch.
    flat: Any = None
    flat_template: Any = None
    _templates: Templates = field(default_factory=Templates)
    # ``compiled_templates.capture``, or the native accessor's (``tilelens.core.native.choose``): chosen per
    # writer by :meth:`use_templates`.
    _capture: Any = capture
    native_why: str = ""  # why ``_capture`` is what it is (``tilelens doctor``, ``--debug``)

    # Set on the first launch: whether ``runner`` calls a callable grid with its bound arguments as Triton does
    # (``compat.run_compiled``, or a stand-in that says so with ``binds_like_triton = True``).
    _probe_grid: bool | None = None
    # id(tuner) -> (tuner, its key positions, whether no parameter is named "grid" or "warmup", the highest
    # key position)
    _tuner_plans: dict[int, TunerPlan] = field(default_factory=dict)
    _tuner_run: Any = None  # Triton's ``Autotuner.run``, looked up at the first autotuned launch
    _best_cache: dict[int, tuple[Any, tuple[Any, ...]]] = field(default_factory=dict)
    _grids: dict[tuple[int, ...], tuple[int, int, int]] = field(default_factory=dict)

    def use_templates(self, writer: Any) -> None:
        """Send templated launches (``compiled_templates``) to ``writer`` from now on; None: raw launches only.
        Templates are numbered per writer: a new writer starts a new table."""
        self._templates = Templates()
        self.flat = getattr(writer, "submit_flat", None)
        self.flat_template = getattr(writer, "submit_template", None)
        if self.flat is None or self.flat_template is None:
            self.flat = self.flat_template = None
        if self.flat is None:
            self._capture, self.native_why = capture, "no templated launches: nothing to capture"
            return
        choice = native.choose()
        self._capture = capture if choice.accessor is None else choice.accessor.capture
        self.native_why = choice.why

    @property
    def native_capture(self) -> bool:
        """Whether templated launches are captured by the native accessor (``tilelens.core.native``)."""
        return self._capture is not capture

    def _binds_like_triton(self) -> bool:
        """Whether ``runner`` calls a callable grid with its bound arguments as Triton does (set once)."""
        probe_grid = self._probe_grid
        if probe_grid is None:
            runner = self.runner
            probe_grid = self._probe_grid = compat.GRID_RECEIVES_BOUND_ARGS and (
                runner is compat.run_compiled or bool(getattr(runner, "binds_like_triton", False))
            )
        return probe_grid

    def route(self, kernel: Any, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if kind == "autotuner":
            return self.tune(kernel, args, kwargs)
        if kind == "heuristics":
            return self.heuristics(kernel, args, kwargs)
        return self.launch(kernel, args, kwargs)

    def direct_routes(self) -> dict[str, Any]:
        """What ``interception_patches(direct=...)`` calls per kind, without the ``route`` dispatch."""
        return {"jit": self.launch, "autotuner": self.tune, "heuristics": self.heuristics}

    # -- launches --------------------------------------------------------------------------------------

    def launch(self, jit: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A ``JITFunction`` launch. The steady one of a ``snapshots="none"`` recording (Triton binds, a template
        already made) is finished here in one frame, as :meth:`_launch_unsnapshotted` and :meth:`_after` would:
        it runs on every launch of a launch-bound program; anything else goes the general way."""
        # ``kwargs`` is the dict the interception's ``run(**kwargs)`` made for this call: ours to change.
        grid = kwargs.pop("grid", None)
        kwargs.pop("warmup", None)
        stack = self._local.stack
        if (
            self.policy.mode != "none"
            or not self._probe_grid
            or stack is None
            or (stack and _THREAD.bench_depth)
        ):
            return self._launch(jit, args, grid, kwargs)
        k = self._kernels.get(id(jit))
        if k is None or k.jit is not jit:
            return self._launch(jit, args, grid, kwargs)
        probe = GridProbe(grid)
        started = time.time()
        t0 = time.perf_counter()
        try:
            result = self.runner(jit, args, probe, kwargs)
        except BaseException as exc:  # recorded, then re-raised unchanged
            return self._after(
                k, jit, args, grid, probe, kwargs, stack, None, exc, started, time.perf_counter() - t0
            )
        duration = time.perf_counter() - t0
        if stack and stack[-1].leaf is not jit:
            stack = self._frames_of(stack, jit)
        bound = probe.bound
        if bound is not None and self.flat is not None:
            handle = self._templated(k, bound, probe, kwargs, stack, result, started, duration)
            if handle is not None:
                for f in reversed(stack):  # ``_attach``: the innermost tuner frame gets the launch's handle
                    if f.tuner:
                        f.launch = handle
                        break
                return result
        return self._after(k, jit, args, grid, probe, kwargs, stack, result, None, started, duration)

    def _launch(self, jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
        local = self._local
        stack = local.stack
        if stack is None:
            stack = local.stack = []
        elif stack and _THREAD.bench_depth > 0:  # one config's benchmark (inside a tuner's frame), unrecorded
            tuner = next((f for f in reversed(stack) if f.tuned), None)
            if tuner is not None:
                tuner.trials += 1
            return self.runner(jit, args, grid, kwargs)
        k = self._kernels.get(id(jit))
        if k is None or k.jit is not jit:
            k = self._kernel(jit)
        if self.policy.mode == "none":
            return self._launch_unsnapshotted(k, jit, args, grid, kwargs, stack)  # `_after` keeps its frames
        if stack:
            stack = self._frames_of(stack, jit)
        bound, options = k.bind(args, kwargs)
        try:
            resolved = resolve_grid(grid, bound)
        except Exception:  # noqa: BLE001 - the launch below raises what the program would see
            resolved = (0, 0, 0)
        records = describe_arguments(k.params, bound, snapshots=False)
        pending = PendingSnapshots(pool=self.pool) if self.policy.wants(k.identity, records) else None
        if pending is not None:
            self._copy(k, bound, records, pending, after=False)
        started, result, error, duration = self._run_timed(jit, args, grid, kwargs)
        if pending is not None and not pending.dropped:
            self._copy(k, bound, records, pending, after=True)
        context = self._context(stack, bound)
        rec = self._record(k, resolved, records, error, options, context, result, started, duration)
        handle = self.sink.submit_launch(rec, pending)
        self._attach(stack, handle)
        if error is not None:
            raise error
        return result

    def _copy(
        self,
        k: RoutedKernel,
        bound: dict[str, Any],
        records: list[ArgumentRecord],
        pending: PendingSnapshots,
        after: bool,
    ) -> None:
        """Queue the launch's before (or after) copies into ``pending``. When the pinned pool refuses a slice
        (the writer's backlog is full) the launch is recorded without snapshots, never waited for, and counted
        (``SnapshotPolicy.dropped``, docs/gpu-recording.md "Back-pressure"); the slices it already leased go
        back once the copies queued into them are done (the writer waits for ``pending.event``)."""
        into = pending.after if after else pending.before
        try:
            if copy_spans(k.params, bound, records, into, pending) and after:
                pending.event = record_event(records)
        except BacklogFull:
            pending.dropped = True
            pending.event = record_event(records)
            with self.policy.lock:
                self.policy.dropped += 1

    def _run_timed(
        self, jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]
    ) -> tuple[float, Any, BaseException | None, float]:
        """Run the launch as the program asked: its start (seconds since the epoch; the record's datetime is
        made later), result, exception (re-raised by the caller after recording it, unchanged) and duration
        in seconds."""
        started = time.time()
        t0 = time.perf_counter()
        try:
            return started, self.runner(jit, args, grid, kwargs), None, time.perf_counter() - t0
        except BaseException as exc:  # recorded, then re-raised unchanged
            return started, None, exc, time.perf_counter() - t0

    def _launch_unsnapshotted(
        self,
        k: RoutedKernel,
        jit: Any,
        args: tuple[Any, ...],
        grid: Any,
        kwargs: dict[str, Any],
        stack: list[Frame],
    ) -> Any:
        """The fast path: the program's thread keeps a raw launch of plain values (``compiled_rows``); the
        writer (a thread or the writer process) builds the record. With Triton's runner the arguments are the
        ones Triton bound (:class:`GridProbe`), read after the launch is queued (a launch changes no tensor's
        metadata); otherwise, or when Triton failed before binding, they are bound here as ``arguments.bind``
        binds them."""
        probe_grid = self._probe_grid
        if probe_grid is None:
            probe_grid = self._binds_like_triton()
        probe = GridProbe(grid) if probe_grid else None
        started = time.time()
        t0 = time.perf_counter()
        error: BaseException | None = None
        try:
            result = self.runner(jit, args, grid if probe is None else probe, kwargs)
        except BaseException as exc:  # recorded, then re-raised unchanged
            result, error = None, exc
        duration = time.perf_counter() - t0
        return self._after(k, jit, args, grid, probe, kwargs, stack, result, error, started, duration)

    def _after(
        self,
        k: RoutedKernel,
        jit: Any,
        args: tuple[Any, ...],
        grid: Any,
        probe: Any,
        kwargs: dict[str, Any],
        stack: list[Frame],
        result: Any,
        error: BaseException | None,
        started: float,
        duration: float,
    ) -> Any:
        """The rest of a launch on the fast path, once it ran (``probe``: a ``compiled_frames.GridProbe``, or
        None): queue it templated or raw, give its handle to the tuner's frame, and return its result or raise
        its exception."""
        if stack:
            stack = self._frames_of(stack, jit)
        bound = None if probe is None else probe.bound
        if bound is not None and error is None and self.flat is not None:
            handle = self._templated(k, bound, probe, kwargs, stack, result, started, duration)
            if handle is not None:
                if stack:
                    self._attach(stack, handle)
                return result
        raw = self._raw(k, jit, args, grid, probe, kwargs, stack, result, error, started, duration)
        submit = self.submit
        handle = submit(k, raw) if submit is not None else self.sink.submit_raw(k, raw)
        if stack:
            self._attach(stack, handle)
        if error is not None:
            raise error
        return result

    def _templated(
        self,
        k: RoutedKernel,
        bound: dict[str, Any],
        probe: Any,  # a GridProbe
        kwargs: dict[str, Any],
        stack: list[Frame],
        result: Any,
        started: float,
        duration: float,
    ) -> Any:
        """Queue a successful launch Triton bound as a flat tuple of what varies (``compiled_templates``),
        making its template first when it is the first of its kind; None when it cannot be templated (the
        caller queues a raw launch)."""
        last = k.last_template
        got = self._capture(k.flat_plan, bound, None if last is None else last[1])
        if got is None:
            return None
        sig, values = got
        metadata = None
        if result is not None:
            known = self._metadata_cache.get(id(result))
            metadata = known[1] if known is not None and known[0] is result else self._metadata(result)
        templates = self._templates
        try:
            # What the frames say is decided by the frames' objects and the tuning key (the chosen config's
            # values are the launch's constexprs and options, heuristics values constexpr arguments: in
            # ``sig`` and ``options``), so those stand in the key for ``_context``'s texts and dicts; the
            # template keeps the objects named by identity alive.
            frames = None if not stack else tuple([f.tkey for f in stack])
            # The launch options only: keyword arguments that are parameters are in ``sig``/``values`` (a key
            # holding the program's tensors would keep them alive, and miss on every launch).
            options = k.options_key(kwargs) if kwargs else None
            mid, node = id(metadata), session.nodeid
            if (
                last is not None
                and last[0] is templates
                and last[4] == mid
                and last[5] == node
                and (last[1] is sig or last[1] == sig)
                and last[2] == options
                and last[3] == frames
            ):
                number = last[6]
            else:
                key = (k.number, tuple(sig) if type(sig) is list else sig, options, frames, mid, node)
                number = templates.numbers.get(key)
                if number is not None:
                    k.last_template = (templates, sig, options, frames, mid, node, number)
        except Exception:  # noqa: BLE001 - an unhashable (or uncomparable) keyword argument or tuning key
            return None
        value = probe.value
        resolved = self._grids.get(value) if type(value) is tuple else None
        if resolved is None:
            resolved = self._grid_of(value, bound)
        if number is None:
            raw = self._raw(k, None, (), None, probe, kwargs, stack, result, None, started, duration)
            alive = (metadata, [f.layer for f in stack])
            number = templates.add(key, body_of(raw, slots_of(k.params, bound)), alive)
            if number is None:
                return None
            self.flat_template(k, number, templates.keep[number - 1][0])
            k.last_template = (templates, sig, options, frames, mid, node, number)
        return self.flat(number, started, duration, resolved, values)

    def _raw(
        self,
        k: RoutedKernel,
        jit: Any,
        args: tuple[Any, ...],
        grid: Any,
        probe: Any,  # a GridProbe, or None
        kwargs: dict[str, Any],
        stack: list[Frame],
        result: Any,
        error: BaseException | None,
        started: float,
        duration: float,
    ) -> tuple[Any, ...]:
        """The :data:`~tilelens.core.compiled.rows.RawLaunch` of a launch (``probe.bound``: Triton bound it)."""
        bound = None if probe is None else probe.bound
        if bound is None:
            bound, options = k.bind(args, kwargs)
            try:
                resolved = resolve_grid(grid, bound)
            except Exception:  # noqa: BLE001 - the launch raised what the program sees
                resolved = (0, 0, 0)
        else:
            options = k.options(kwargs) if kwargs else {}
            resolved = self._grid_of(probe.value, bound)
        snapped, device = snap_planned(k.plan, k.params, bound)
        gpu_name = self._gpu_names.get(device, False)
        if gpu_name is False:
            gpu_name = self._gpu_name(device)
        metadata = None
        if result is not None:
            known = self._metadata_cache.get(id(result))
            metadata = known[1] if known is not None and known[0] is result else self._metadata(result)
        return (
            snapped,
            resolved,
            None if error is None else describe_failure(error),
            options,
            self._context(stack, bound) if stack else None,
            metadata,
            started,
            duration,
            gpu_name,
            session.nodeid,
        )

    def _grid_of(self, value: Any, bound: dict[str, Any]) -> tuple[int, int, int]:
        """``resolve_grid`` of what the program's grid gave Triton; a tuple of ints is resolved once."""
        known = self._grids.get(value) if type(value) is tuple else None
        if known is not None:
            return known
        try:
            resolved = resolve_grid(value, bound)
        except Exception:  # noqa: BLE001 - the program's grid raised (the launch raised it) or no grid
            return (0, 0, 0)
        if type(value) is tuple and all(type(v) is int for v in value):
            if len(self._grids) > 4096:
                self._grids.clear()
            self._grids[value] = resolved
        return resolved

    def _metadata(self, result: Any) -> dict[str, Any]:
        """``compat.compile_metadata`` of a compiled kernel, read once per kernel object (after its first
        launch, which is when Triton fills ``n_regs``/``n_spills``)."""
        known = self._metadata_cache.get(id(result))
        if known is not None and known[0] is result:
            return known[1]
        if len(self._metadata_cache) > 4096:  # stand-ins may return a new object per launch
            self._metadata_cache.clear()
        metadata = compat.compile_metadata(result)
        self._metadata_cache[id(result)] = (result, metadata)
        return metadata

    def _context(self, stack: list[Frame], bound: dict[str, Any]) -> tuple[Any, ...]:
        """What the frames say about this launch, read now (a later tuning may change the autotuner's cache),
        as plain values: the chosen config as ``(its dict,)`` (the one Triton launched the call with:
        ``compat.used_config``), the heuristics' values, the tuning key as its text."""
        tuner: Any = None
        key_frame: Frame | None = None
        heuristics = _NO_HEURISTICS
        for f in stack:
            if f.heuristics:
                if heuristics is _NO_HEURISTICS:
                    heuristics = {}
                for name in f.heuristics:
                    heuristics[name] = bound.get(name)
            if f.tuner:
                tuner = f.layer
            if f.tuned:
                key_frame = f
        key = None if key_frame is None or key_frame.layer is not tuner else self._full_key(key_frame)
        best = None if tuner is None else self._best(compat.used_config(tuner, key))
        if key_frame is None:
            return best, heuristics, None
        text = key_frame.key_text
        if text is None:
            text = key_frame.key_text = self._key_text(self._full_key(key_frame))
        return best, heuristics, text

    def _best(self, config: Any) -> tuple[Any, ...]:
        """``(config_dict(config),)``, made once per config object."""
        known = self._best_cache.get(id(config))
        if known is None or known[0] is not config:
            known = self._best_cache[id(config)] = (config, (self._config_dict(config),))
        return known[1]

    def _config_dict(self, config: Any) -> dict[str, Any] | None:
        if config is None:
            return None
        known = self._config_cache.get(id(config))
        if known is None or known[0] is not config:
            known = self._config_cache[id(config)] = (config, config_dict(config))
        return known[1]

    def _key_text(self, key: Any) -> str:
        try:
            text = self._key_cache.get(key)
        except TypeError:  # an unhashable key: described every time
            return str(key)
        if text is None:
            if len(self._key_cache) > 4096:
                self._key_cache.clear()
            text = self._key_cache[key] = str(key)
        return text

    def _attach(self, stack: list[Frame], handle: Any) -> None:
        """The innermost tuner frame gets the launch's handle."""
        for f in reversed(stack):
            if f.tuner:
                f.launch = handle
                return

    def _record(
        self,
        k: RoutedKernel,
        resolved: tuple[int, int, int],
        records: list[ArgumentRecord],
        error: BaseException | None,
        options: dict[str, Any],
        context: tuple[Any, ...] | None,
        result: Any,
        started: Any,
        duration: float,
    ) -> LaunchRecord:
        return record_of(
            k.identity,
            resolved,
            records,
            None if error is None else describe_failure(error),
            options,
            context,
            None if result is None else self._metadata(result),
            started,
            duration,
            self._gpu_name(first_device(records)),
        )

    def _gpu_name(self, device: str) -> str | None:
        if not device.startswith("cuda"):
            self._gpu_names[device] = None
            return None
        name = self._gpu_names.get(device, False)
        if name is not False:
            return name  # type: ignore[return-value]
        import torch

        try:
            self._gpu_names[device] = torch.cuda.get_device_name(torch.device(device))
        except Exception:  # noqa: BLE001 - a name is nice to have, never worth failing a launch
            self._gpu_names[device] = None
        return self._gpu_names[device]
