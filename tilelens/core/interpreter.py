"""The one place where TileLens patches Triton.

Two patch sets, each installed and removed as a unit, in reverse order, even when the code inside raises:

* ``launch_patches`` — for the length of one interpreted launch: routes the interpreter builder's memory
  methods into the active ``AccessCollector`` and keeps stray lanes (outside every argument's storage) from
  touching memory (``tilelens.core.bounds``), feeding a replay's recorded out-of-bounds reads back; lets
  nested ``@triton.jit`` helpers (decorated in compiled mode, like ``tl.sum`` in a process that imported
  Triton without ``TRITON_INTERPRET``) run interpreted, turns ``knobs.runtime.interpret`` on, and restores
  every ``tl`` namespace afterwards (the stock interpreter can leak patches of helpers' modules).
  It also installs the compiled-Triton semantics of ``tilelens.core.semantics`` (typed scalar parameters,
  bfloat16 arithmetic, libdevice), so recorded and replayed launches compute what compiled Triton computes.
* ``interception_patches`` — for the length of a ``tilelens.record()`` block: makes every launch of a
  ``JITFunction``, ``Autotuner``, ``Heuristics`` or ``InterpretedFunction`` go through the recorder.

State that must not outlive a launch (the active collector, the interpreted-helper cache) lives on the
``LaunchContext`` object, not in module globals.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tilelens.core import bounds, compat, semantics
from tilelens.core.access import ATOMIC_CAS, LOAD, STORE, AccessCollector

# Interpreted launches share one global interpreter builder in Triton: they must never overlap.
LAUNCH_LOCK = threading.RLock()
_local = threading.local()


class _Patcher:
    """Sets attributes and puts every one of them back, last-set first."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, bool, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        had = name in vars(owner)
        self._saved.append((owner, name, had, vars(owner).get(name)))
        setattr(owner, name, value)

    def set_item(self, mapping: dict[str, Any], key: str, value: Any) -> None:
        """Like ``set`` for a dict that is no object's ``vars`` (a function's globals)."""
        self._saved.append((mapping, key, key in mapping, mapping.get(key)))
        mapping[key] = value

    def restore(self) -> None:
        while self._saved:
            owner, name, had, old = self._saved.pop()
            if isinstance(owner, dict):
                if had:
                    owner[name] = old
                else:
                    owner.pop(name, None)
            elif had:
                setattr(owner, name, old)
            else:
                delattr(owner, name)


class LaunchContext:
    """Per-launch state: the collector receiving accesses and interpreted stand-ins for nested helpers."""

    def __init__(
        self, collector: AccessCollector, patcher: _Patcher, reads: bounds.RecordedReads | None = None
    ) -> None:
        self.collector = collector
        self.reads = reads  # a replay's recorded out-of-bounds reads, fed back to the same lanes
        self.helpers: dict[int, Any] = {}
        self.patcher = patcher  # for patches only known once the kernel runs (libdevice in its globals)
        self.redirected: set[int] = set()  # ids of the code objects whose libdevice names are redirected

    def interpreted_helper(self, fn: Any) -> Any:
        # Keyed by id(): hashing a JITFunction computes its cache_key, which must not happen inside a launch.
        helper = self.helpers.get(id(fn))
        if helper is None:
            helper = self.helpers[id(fn)] = (fn, make_interpreted(fn.fn))
        return helper[1]


def current_launch() -> LaunchContext | None:
    return getattr(_local, "launch", None)


@contextlib.contextmanager
def recorded_reads(reads: bounds.RecordedReads | None) -> Iterator[None]:
    """Interpreted launches started on this thread inside the block get ``reads`` fed back (a CPU replay)."""
    before = getattr(_local, "reads", None)
    _local.reads = reads
    try:
        yield
    finally:
        _local.reads = before


def make_interpreted(pyfn: Callable[..., Any]) -> Any:
    """An InterpretedFunction for ``pyfn`` whose rewrite leaves Triton's JIT registry as it was.

    Rewriting builds a throwaway ``JITFunction`` that would replace the user's own in Triton's
    "module:qualname" registry; we put the user's entry back.
    """
    interp = compat.InterpretedFunction(pyfn)
    registry = compat.jit_registry
    if registry is None:
        interp.rewrite()
        return interp
    key = f"{pyfn.__module__}:{pyfn.__qualname__}"
    missing = object()
    before = registry.get(key, missing)
    try:
        interp.rewrite()
    finally:
        if before is missing:
            registry.pop(key, None)
        else:
            registry[key] = before
    return interp


def _access_hooks(originals: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """Capture every memory access, and keep stray lanes away from memory (see tilelens.core.bounds).

    The guard runs before Triton's own method: stray store/atomic lanes are masked off (``atomic_cas``, which
    has no mask, gets scratch pointers for them), stray load lanes are masked off and read through the
    fault-safe path. During a replay, the lanes that read out-of-bounds memory at record time get the
    recorded bytes (``LaunchContext.reads``) before the kernel sees the result.
    """
    load, store = originals["create_masked_load"], originals["create_masked_store"]
    rmw, cas = originals["create_atomic_rmw"], originals["create_atomic_cas"]
    elem_bytes = compat.element_bytes
    with_data = compat.with_data

    # Only the leading parameters are named: the cache/eviction parameters after them differ between Triton
    # releases (3.9 folded them into one cache_policy), and are passed through untouched.
    def create_masked_load(self, ptrs, mask, *rest, **kw):
        launch = current_launch()
        if launch is None:
            return load(self, ptrs, mask, *rest, **kw)
        collector = launch.collector
        addrs, active = ptrs.data, mask.data
        eb = elem_bytes(ptrs.get_element_ty())
        storage = collector.spans.storage
        stray = None if storage is None else storage.stray(addrs, active, eb)
        if stray is not None:
            ret = load(self, ptrs, with_data(mask, _without(active, stray)), *rest, **kw)
            ret.data = bounds.read_stray(ret.data, addrs, stray, eb, storage)
        else:
            ret = load(self, ptrs, mask, *rest, **kw)
        if launch.reads is not None:
            ret.data = launch.reads.apply(self.grid_idx, collector.next_event(self.grid_idx), ret.data)
        collector.record(LOAD, addrs, active, eb, self.grid_idx, ret.data, stray)
        return ret

    def create_masked_store(self, ptrs, value, mask, *rest, **kw):
        launch = current_launch()
        if launch is None:
            return store(self, ptrs, value, mask, *rest, **kw)
        collector = launch.collector
        addrs, active = ptrs.data, mask.data
        eb = elem_bytes(ptrs.get_element_ty())
        storage = collector.spans.storage
        stray = None if storage is None else storage.stray(addrs, active, eb)
        collector.record(STORE, addrs, active, eb, self.grid_idx, None, stray)
        if stray is not None:
            mask = with_data(mask, _without(active, stray))
        return store(self, ptrs, value, mask, *rest, **kw)

    def create_atomic_rmw(self, rmwOp, ptr, val, mask, *rest, **kw):  # noqa: N803 (Triton's name)
        launch = current_launch()
        if launch is None:
            return rmw(self, rmwOp, ptr, val, mask, *rest, **kw)
        collector = launch.collector
        addrs, active = ptr.data, mask.data
        eb = elem_bytes(ptr.get_element_ty())
        storage = collector.spans.storage
        stray = None if storage is None else storage.stray(addrs, active, eb)
        if stray is not None:
            ret = rmw(self, rmwOp, ptr, val, with_data(mask, _without(active, stray)), *rest, **kw)
            ret.data = bounds.zero_lanes(ret.data, stray)
        else:
            ret = rmw(self, rmwOp, ptr, val, mask, *rest, **kw)
        if launch.reads is not None:
            ret.data = launch.reads.apply(self.grid_idx, collector.next_event(self.grid_idx), ret.data)
        op = "atomic_" + str(getattr(rmwOp, "name", rmwOp)).lower()
        collector.record(op, addrs, active, eb, self.grid_idx, ret.data, stray)
        return ret

    def create_atomic_cas(self, ptr, *rest, **kw):
        launch = current_launch()
        if launch is None:
            return cas(self, ptr, *rest, **kw)
        collector = launch.collector
        addrs = ptr.data
        eb = elem_bytes(ptr.get_element_ty())
        storage = collector.spans.storage
        stray = None if storage is None else storage.stray(addrs, None, eb)
        if stray is not None:
            safe, scratch = bounds.scratch_pointers(addrs, stray, eb)
            ret = cas(self, with_data(ptr, safe), *rest, **kw)
            del scratch  # written by the stray lanes' compare-and-swap, read by nobody
            ret.data = bounds.zero_lanes(ret.data, stray)
        else:
            ret = cas(self, ptr, *rest, **kw)
        if launch.reads is not None:
            ret.data = launch.reads.apply(self.grid_idx, collector.next_event(self.grid_idx), ret.data)
        collector.record(ATOMIC_CAS, addrs, None, eb, self.grid_idx, ret.data, stray)
        return ret

    return {
        "create_masked_load": create_masked_load,
        "create_masked_store": create_masked_store,
        "create_atomic_rmw": create_atomic_rmw,
        "create_atomic_cas": create_atomic_cas,
    }


def _without(active: np.ndarray, stray: np.ndarray) -> np.ndarray:
    """The mask ``active`` with the stray lanes cleared, in the mask's own shape."""
    return np.broadcast_to(np.asarray(active, dtype=bool), stray.shape) & ~stray


def _semantic_patches(patcher: _Patcher) -> None:
    """Install the compiled-Triton semantics of ``tilelens.core.semantics`` (see there for why)."""
    builder_cls = compat.InterpreterBuilder
    module = compat.interpreter_module
    patcher.set(module, "_implicit_cvt", semantics.typed_scalar_cvt(module._implicit_cvt))
    patcher.set(module, "_patch_lang", _patch_lang_with_libdevice(module._patch_lang))
    patcher.set(builder_cls, "get_bf16", semantics.get_bf16)
    patcher.set(builder_cls, "create_extern_elementwise", semantics.extern_elementwise)
    patcher.set(builder_cls, "cast_impl", semantics.bf16_cast(builder_cls.cast_impl))
    for name in ("binary_op", "unary_op", "create_fma", "create_clampf"):
        patcher.set(builder_cls, name, semantics.through_fp32(getattr(builder_cls, name)))
    patcher.set(builder_cls, "create_dot", semantics.through_fp32(builder_cls.create_dot, result_from=2))
    patcher.set(builder_cls, "create_atomic_rmw", semantics.bf16_atomic_rmw(builder_cls.create_atomic_rmw))
    patcher.set(compat.ReduceOps, "sum", semantics.bf16_sum(compat.ReduceOps.sum))
    patcher.set(compat.ReduceOps, "min_max", semantics.bf16_min_max(compat.ReduceOps.min_max))
    patcher.set(compat.ScanOps, "cumsum", semantics.bf16_scan(compat.ScanOps.cumsum, np.cumsum))
    patcher.set(compat.ScanOps, "cumprod", semantics.bf16_scan(compat.ScanOps.cumprod, np.cumprod))


def _patch_lang_with_libdevice(original: Callable[..., Any]) -> Callable[..., Any]:
    """The interpreter's per-function language patching, plus libdevice resolution in that function's globals.

    The interpreter calls it for the kernel and for every interpreted helper, so helpers in other modules
    get their libdevice references resolved too; all of it is undone when the launch ends.
    """

    def _patch_lang(fn):
        scope = original(fn)
        launch = current_launch()
        if launch is not None:
            fn_globals = getattr(fn, "__globals__", None)
            code = getattr(fn, "__code__", None)
            # Once per function and launch: the interpreter calls this for every helper call, in every loop.
            if fn_globals is not None and code is not None and id(code) not in launch.redirected:
                launch.redirected.add(id(code))
                names = semantics.global_names(code)
                for name, value in semantics.libdevice_redirects(fn_globals, names):
                    launch.patcher.set_item(fn_globals, name, value)
        return scope

    return _patch_lang


def _jit_call(original: Callable[..., Any]) -> Callable[..., Any]:
    def __call__(self, *args, **kwargs):
        launch = current_launch()
        if launch is None:
            return original(self, *args, **kwargs)
        return launch.interpreted_helper(self)(*args, **kwargs)

    return __call__


@contextlib.contextmanager
def launch_patches(collector: AccessCollector) -> Iterator[LaunchContext]:
    """Interpret one launch with access capture; everything touched is restored on exit."""
    with LAUNCH_LOCK:
        if current_launch() is not None:
            raise RuntimeError("TileLens: a Triton launch started inside another interpreted launch")
        patcher = _Patcher()
        lang_snapshot = [(ns, dict(vars(ns))) for ns in compat.LANG_NAMESPACES]
        builder_cls = compat.InterpreterBuilder
        ctx = LaunchContext(collector, patcher, getattr(_local, "reads", None))
        try:
            with compat.runtime_interpret_scope():
                compat.set_interpret(True)
                _semantic_patches(patcher)
                # Taken after the semantic patches, so accesses are captured around their versions too.
                originals = {name: getattr(builder_cls, name) for name in compat.ACCESS_METHODS}
                for name, hook in _access_hooks(originals).items():
                    patcher.set(builder_cls, name, hook)
                patcher.set(compat.JITFunction, "__call__", _jit_call(compat.JITFunction.__call__))
                _local.launch = ctx
                try:
                    yield ctx
                finally:
                    _local.launch = None
        finally:
            patcher.restore()
            _restore_namespaces(lang_snapshot)


class _NoCapture(AccessCollector):
    def record(self, *args: Any, **kwargs: Any) -> None:
        pass


@contextlib.contextmanager
def compiled_semantics() -> Iterator[None]:
    """Triton's interpreter with TileLens's compiled-Triton semantics but no capture, for the block.

    The baseline for kernels the stock interpreter cannot run at all (the benchmark's "stock" for them).
    """
    with launch_patches(_NoCapture()):
        yield


def _restore_namespaces(snapshot: list[tuple[Any, dict[str, Any]]]) -> None:
    for ns, before in snapshot:
        now = vars(ns)
        for name in [n for n in now if n not in before]:
            with contextlib.suppress(AttributeError, TypeError):
                delattr(ns, name)
        for name, value in before.items():
            if now.get(name, _MISSING) is not value:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(ns, name, value)


_MISSING = object()

LaunchRouter = Callable[[Any, str, tuple[Any, ...], dict[str, Any]], Any]


@contextlib.contextmanager
def interception_patches(route: LaunchRouter) -> Iterator[None]:
    """Send every kernel launch to ``route(kernel, kind, args, kwargs)`` while the block runs.

    Layers that TileLens already traced (marked with ``_tilelens_trace``) and launches made from inside an
    interpreted launch keep Triton's own behaviour, so the traced chain runs exactly as Triton would run it.
    """
    patcher = _Patcher()

    def layered(cls: type, kind: str) -> Callable[..., Any]:
        original = cls.run

        def run(self, *args, **kwargs):
            if getattr(self, "_tilelens_trace", None) is not None or current_launch() is not None:
                return original(self, *args, **kwargs)
            if kwargs.get("warmup"):
                return original(self, *args, **kwargs)
            return route(self, kind, args, kwargs)

        run.__wrapped__ = original  # type: ignore[attr-defined]
        return run

    try:
        patcher.set(compat.JITFunction, "run", layered(compat.JITFunction, "jit"))
        patcher.set(compat.InterpretedFunction, "run", layered(compat.InterpretedFunction, "interpreted"))
        patcher.set(compat.Autotuner, "run", layered(compat.Autotuner, "autotuner"))
        patcher.set(compat.Heuristics, "run", layered(compat.Heuristics, "heuristics"))
        yield
    finally:
        patcher.restore()


def original_run(cls: type) -> Callable[..., Any]:
    """The class's ``run`` as Triton defines it, even while interception is installed."""
    for klass in cls.__mro__:
        if "run" in vars(klass):
            run = vars(klass)["run"]
            return getattr(run, "__wrapped__", run)
    raise AttributeError(f"{cls.__name__} has no run method")
