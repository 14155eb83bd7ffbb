"""Wrapping Triton kernels so that their launches run interpreted and are recorded.

A kernel is a chain of layers: ``Autotuner`` / ``Heuristics`` objects, each holding the next in ``.fn``, ending
in a ``JITFunction`` (or an ``InterpretedFunction`` when it was decorated with ``TRITON_INTERPRET=1``).
Tracing keeps every layer and replaces only the end of the chain with an ``_InterpretedLeaf``: its ``run``
interprets and records, and its ``.fn`` is still the user's ``JITFunction``. So Triton's own walks down the
chain (the autotune listener, the disk cache) find the object an untraced launch would report.

Gluon kernels (``@gluon.jit``) are traced the same way: the leaf's ``.fn`` is the user's ``GluonJITFunction``
and its launches run in TileLens's Gluon simulator (``tilelens.core.engine.gluon``) instead of compiling.

Traced autotuners get a dummy benchmarker (interpreter timings mean nothing, and a machine without a GPU
driver has no benchmarker at all) and ``cache_results = False``: Triton decides disk caching at decoration,
before TileLens switches to the interpreter, and would otherwise persist dummy timings.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilelens.core import compat, session
from tilelens.core.engine import bounds
from tilelens.core.engine.launch_context import current_launch
from tilelens.core.interpreted.launch import LaunchMeta, run_interpreted
from tilelens.core.kernel.arguments import Param, config_dict, kernel_params
from tilelens.core.kernel.identity import kernel_identity
from tilelens.core.patches import make_interpreted, original_run, rewire_chain, shadow_jit
from tilelens.errors import StateError
from tilelens.records import ArgumentRecord, AutotuneEvent, KernelIdentity, LaunchRecord

DUMMY_TIMING = [1.0, 1.0, 1.0]


@dataclass
class _TuneFrame:
    """One traced ``Autotuner.run`` call in progress on this thread."""

    tuner: Any
    key: tuple[Any, ...] | None
    trial: bool = False
    launches: list[Any] = field(default_factory=list)  # the sink's handles of this tuning's final launches


_frames = threading.local()


def _stack() -> list[_TuneFrame]:
    stack = getattr(_frames, "stack", None)
    if stack is None:
        stack = _frames.stack = []
    return stack


class MemorySink:
    """Where a traced kernel's launches go when no ``tilelens.record()`` block is active."""

    autotune_policy = "first"
    on_oob = bounds.DEFAULT_ON_OOB

    def __init__(self, keep: int = 100) -> None:
        self.records: deque[LaunchRecord] = deque(maxlen=keep)
        self.autotune_events: deque[AutotuneEvent] = deque(maxlen=keep)

    def write_launch(self, rec: LaunchRecord) -> Any:
        self.records.append(rec)
        return rec

    def write_autotune_event(self, event: AutotuneEvent, launch: Any) -> None:
        self.autotune_events.append(event)


class _InterpretedLeaf(compat.KernelInterface):  # type: ignore[misc]  # Triton is untyped (Any)
    """The end of a traced chain: runs the kernel in the interpreter; ``.fn`` is the user's JITFunction.

    Attributes it does not define are forwarded to the interpreted function, so code that reads
    ``arg_names``, ``pre_run_hooks`` or ``rewrite`` off the chain keeps working.
    """

    def __init__(self, source: Any) -> None:
        self.fn = source
        self.snapshots = True  # tensor copies in each record; off for replay, which keeps its own tensors
        self.layers: list[Any] = []
        self.memory = MemorySink()
        pyfn = source.fn
        self.params: list[Param] = kernel_params(pyfn)
        self.arg_names = [p.name for p in self.params]
        # Both are computed now, before any interpreted launch can poison cache keys.
        if current_launch() is not None:
            raise StateError("TileLens: kernel identity must be computed outside an interpreted launch")
        jit = source if isinstance(source, compat.JITFunction) else shadow_jit(pyfn)
        self.identity: KernelIdentity = kernel_identity(jit)
        self.interpreted = (
            source if isinstance(source, compat.InterpretedFunction) else make_interpreted(pyfn)
        )
        self.gluon = compat.is_gluon(source)  # simulated: Gluon has no interpreter path of its own
        self._accessed: frozenset[int] = frozenset()  # argument positions the last launch accessed

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in (
            "fn",
            "interpreted",
            "layers",
            "memory",
            "params",
            "identity",
            "snapshots",
            "gluon",
            "_accessed",
        ):
            raise AttributeError(name)
        return getattr(self.interpreted, name)

    def run(self, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> Any:
        if warmup:
            return None  # the interpreter has nothing to compile
        sink = session.active() or self.memory
        meta = self._meta(kwargs)
        user_hooks = list(getattr(self.fn, "pre_run_hooks", ())) if self.fn is not self.interpreted else []
        result, record, error = run_interpreted(
            self.interpreted,
            self.identity,
            self.params,
            user_hooks,
            args,
            grid,
            kwargs,
            meta,
            self.snapshots,
            gluon=self.gluon,
            early=self._early_store(sink),
            lines=bool(getattr(sink, "coverage", False)),
        )
        self._accessed = frozenset(record.per_arg or ())
        handle = sink.write_launch(record)
        stack = _stack()
        if stack and not stack[-1].trial:
            stack[-1].launches.append(handle)
        if error is not None:
            raise error
        if record.summary.oob_lanes and getattr(sink, "on_oob", bounds.DEFAULT_ON_OOB) == "raise":
            raise bounds.OutOfBoundsError(bounds.describe_first_oob(record, handle))
        return result

    def _early_store(self, sink: Any) -> Callable[[list[ArgumentRecord]], None] | None:
        """The sink's early store (``Recording.store_early``) for the before-snapshots of the arguments the
        kernel's previous launch accessed: a tensor it never touches keeps no values (``forget_untouched``),
        and storing its snapshot early would only leave an unreferenced blob each launch."""
        store = getattr(sink, "store_early", None)
        accessed = self._accessed
        if store is None or not accessed:
            return None

        def early(args: list[ArgumentRecord]) -> None:
            store([a.before for a in args if a.before is not None and a.position in accessed])

        return early

    def _meta(self, kwargs: dict[str, Any]) -> LaunchMeta:
        meta = LaunchMeta()
        for layer in self.layers:
            if isinstance(layer, compat.Heuristics):
                meta.heuristics.update({k: kwargs.get(k) for k in layer.values})
        stack = _stack()
        if stack:
            frame = stack[-1]
            meta.tuning_key = None if frame.key is None else str(frame.key)
            if frame.trial:
                meta.role = "autotune-trial"
            else:
                best = compat.used_config(frame.tuner, frame.key)
                meta.autotune = {"chosen": config_dict(best) if best is not None else None}
        return meta


class _DummyBench:
    """Stands in for ``do_bench``: equal timings, so Triton keeps the first pruned config.

    Under the ``"all"`` policy each config's trial launch really runs (and is recorded as an
    ``autotune-trial``), so out-of-bounds bugs of configs that were not chosen are found too.
    """

    def __call__(self, kernel_call: Callable[[], Any], quantiles: Any = None, **_: Any) -> list[float]:
        sink = session.active()
        stack = _stack()
        if sink is not None and sink.autotune_policy == "all" and stack:
            frame = stack[-1]
            frame.trial = True
            try:
                kernel_call()
            finally:
                frame.trial = False
        return list(DUMMY_TIMING)


def _traced_tuner_run(tuner: Any, leaf: _InterpretedLeaf) -> Callable[..., Any]:
    """Instance-level ``run`` of a traced autotuner: Triton's run, plus an autotune event per fresh tuning."""
    triton_run = original_run(type(tuner))

    def run(*args: Any, **kwargs: Any) -> Any:
        key = compat.autotune_key(tuner, args, kwargs) if len(tuner.configs) > 1 else None
        fresh = key is not None and key not in tuner.cache
        timings_before = getattr(tuner, "configs_timings", None)
        frame = _TuneFrame(tuner, key)
        stack = _stack()
        stack.append(frame)
        try:
            return triton_run(tuner, *args, **kwargs)
        finally:
            stack.pop()
            if fresh and key in tuner.cache:
                chosen = tuner.cache[key]
                timings = getattr(tuner, "configs_timings", None)
                benched = list(timings) if timings is not None and timings is not timings_before else [chosen]
                event = AutotuneEvent(
                    kernel=leaf.identity,
                    tuning_key=str(key),
                    configs=[config_dict(c) for c in benched],
                    chosen=config_dict(chosen),
                    timings=None,  # dummies: never worth keeping
                )
                sink = session.active() or leaf.memory
                sink.write_autotune_event(event, frame.launches[-1] if frame.launches else None)

    run._tilelens_traced = True  # type: ignore[attr-defined]
    return run


def _is_layer(obj: Any) -> bool:
    return isinstance(obj, (compat.Autotuner, compat.Heuristics))


def _layers_of(kernel: Any) -> list[Any]:
    layers = []
    while _is_layer(kernel):
        layers.append(kernel)
        kernel = kernel.fn
    return layers


def unpack_kernel(kernel: Any, *, in_place: bool = True) -> tuple[Any, list[Any], _InterpretedLeaf]:
    """Trace a kernel chain; return (runner, layers, leaf).

    With ``in_place`` the user's own layers are rewired (the ``tilelens.trace`` decorator); otherwise they
    are shallow-copied first, so a ``tilelens.record()`` block leaves the user's objects untouched (autotune
    caches included: the copy starts from the user's choices but dummy choices never flow back).
    A leaf left by an earlier trace of the same chain is reused, so re-tracing keeps ``jit_fn``. Triton and
    Gluon kernels are unpacked alike (a ``GluonJITFunction`` is a ``JITFunction``).
    """
    layers = _layers_of(kernel)
    node = layers[-1].fn if layers else kernel
    if isinstance(node, _InterpretedLeaf):
        leaf = node
    elif isinstance(node, (compat.JITFunction, compat.InterpretedFunction)):
        leaf = _InterpretedLeaf(node)
    else:
        raise TypeError(
            "TileLens can trace Triton and Gluon kernels (@triton.jit, @gluon.jit, autotune, heuristics), "
            f"not {type(kernel).__name__}"
        )
    layers = rewire_chain(
        layers,
        leaf,
        in_place=in_place,
        bench=_DummyBench,
        tuner_run=lambda tuner: _traced_tuner_run(tuner, leaf),
    )
    leaf.layers = layers
    return (layers[0] if layers else leaf), layers, leaf


class TritonTrace(compat.KernelInterface):  # type: ignore[misc]  # Triton is untyped (Any)
    """A traced Triton kernel: launch it like the original (``traced[grid](...)``), every launch is recorded.

    Inside a ``tilelens.record()`` block launches go to that recording's history; outside, to ``records``
    (the last 100 launches, in memory).
    """

    def __init__(self, kernel: Any, *, in_place: bool = True, snapshots: bool = True) -> None:
        self.kernel = kernel
        self.source_layers = _layers_of(kernel)
        self.runner, self.layers, self.leaf = unpack_kernel(kernel, in_place=in_place)
        if not snapshots:
            self.leaf.snapshots = False

    @property
    def jit_fn(self) -> Any:
        return self.leaf.fn

    @property
    def arg_names(self) -> list[str]:
        return self.leaf.arg_names

    @property
    def records(self) -> deque[LaunchRecord]:
        return self.leaf.memory.records

    @property
    def autotune_events(self) -> deque[AutotuneEvent]:
        return self.leaf.memory.autotune_events

    def run(self, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> Any:
        if warmup:
            return self.warmup(*args, grid=grid, **kwargs)
        return self.runner.run(*args, grid=grid, warmup=False, **kwargs)

    def warmup(self, *args: Any, grid: Any = None, **kwargs: Any) -> Any:
        # A shallow copy: the chain reaches a JITFunction (it holds an RLock, deepcopy fails), and
        # Autotuner.warmup only rebinds ``nargs``, so sharing the rest is safe.
        runner = copy.copy(self.runner)
        if isinstance(runner, compat.Autotuner):
            return runner.warmup(*args, grid=grid, **kwargs)
        return runner.run(*args, grid=grid, warmup=True, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("A traced Triton kernel is launched with a grid: kernel[grid](...)")

    def __repr__(self) -> str:
        return f"TritonTrace({self.leaf.identity.name})"


class GluonTrace(TritonTrace):
    """A traced Gluon kernel (``@gluon.jit``, possibly under autotune/heuristics layers).

    The chain is unpacked like a Triton kernel's, onto the same ``_InterpretedLeaf`` (so the autotune listener
    receives the user's ``GluonJITFunction``); launches run in the Gluon simulator (``tilelens.core.engine.gluon``).
    """

    def __repr__(self) -> str:
        return f"GluonTrace({self.leaf.identity.name})"


def is_gluon_kernel(kernel: Any) -> bool:
    """Whether a kernel chain (autotune/heuristics layers included) ends in a Gluon kernel."""
    node = kernel
    for _ in range(64):
        if compat.is_gluon(node):
            return True
        if isinstance(node, _InterpretedLeaf):
            return node.gluon
        if not _is_layer(node):
            return False
        node = node.fn
    return False


def trace_class(kernel: Any) -> type[TritonTrace]:
    return GluonTrace if is_gluon_kernel(kernel) else TritonTrace


def trace(kernel: Any) -> TritonTrace:
    """Decorator: ``@tilelens.trace`` above ``@triton.jit``/``@gluon.jit``/``@triton.autotune``/heuristics."""
    return trace_class(kernel)(kernel)
