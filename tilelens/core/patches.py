"""The one place where TileLens changes Triton's objects and the user's.

Every attribute TileLens sets on a Triton class, a Triton object or a kernel the user decorated is set here,
through :class:`_Patcher`, and each set of changes is put back as a unit (last-set first, every one of them even
when one fails, also when the code inside raises). Nowhere else in TileLens assigns to such objects (a structure
test checks it). The patch sets:

* ``launch_patches`` — for the length of one interpreted launch: routes the interpreter builder's memory
  methods into the active ``AccessCollector`` and keeps stray lanes (outside every argument's storage) from
  touching memory (``tilelens.core.engine.bounds``), feeding a replay's recorded out-of-bounds reads back; lets
  nested ``@triton.jit`` helpers (decorated in compiled mode, like ``tl.sum`` in a process that imported
  Triton without ``TRITON_INTERPRET``) run interpreted, turns ``knobs.runtime.interpret`` on, and restores
  every ``tl`` namespace afterwards (the stock interpreter can leak patches of helpers' modules).
  It also installs the compiled-Triton semantics of ``tilelens.core.engine.semantics`` (typed scalar parameters,
  bfloat16 arithmetic, libdevice), so recorded and replayed launches compute what compiled Triton computes,
  and on Triton 3.6 the scalar-to-index conversion of 3.7 (3.6's fails under numpy >= 2.4).
  For a Gluon kernel it adds ``gluon_simulation``: the Gluon simulator of ``tilelens.core.engine.gluon`` (Gluon's
  builtins with the simulator's semantic, reductions with Gluon layouts, Gluon's host TMA descriptors).
* ``batched_patches`` — for a launch's grid-batched attempt (``tilelens.core.engine.batched``, entered through
  ``GridExecutor.__call__``): the builder's methods (its object's class), reductions, scans and
  ``tl.tensor``'s truth, index and transpose over the program axis (``batched.plan``); ``grid_idx`` says
  "every program" to the access hooks.
* ``pre_run_hooks`` — for the same launch: the interpreted function's pre-run hooks, with TileLens's own first
  (it reads the argument spans from the interpreter's host copies).
* ``interception_patches`` — for the length of a ``tilelens.record()`` block: makes every launch of a
  ``JITFunction``, ``Autotuner``, ``Heuristics`` or ``InterpretedFunction`` go through the recorder; for a
  compiled recording also marks autotuner benchmark launches (``in_autotune_bench``).
* ``TuningMirror`` — for the length of a ``tilelens.record()`` block: the user's autotuners show what their
  traced copies decided (``best_config``, ...).
* ``rewire_chain`` — tracing a kernel: its autotune/heuristics layers lead to TileLens's interpreted leaf. On
  copies of the layers inside ``record()``; on the user's own layers for ``@tilelens.trace``, which asks for
  exactly that, and for good (all or nothing: a failure part way puts everything back).
* ``jit_registry_kept`` / ``shadow_jit`` / ``make_interpreted`` — constructing a ``JITFunction`` registers it in
  Triton's "module:qualname" registry (3.8); TileLens's own constructions leave the user's entry as it was.
* ``compiled_mode`` — ``knobs.runtime.interpret`` off for a block (replays on a GPU, kernels rebuilt from a
  history's source); every runtime knob restored after.

State that must not outlive a launch (the active collector, the interpreted-helper cache) lives on the
``LaunchContext`` object, not in module globals.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np

from tilelens.core import compat
from tilelens.core.engine import fastbinary, frontend, memhooks, semantics
from tilelens.core.engine.access import BATCH_PROGRAM, AccessCollector
from tilelens.core.engine.batched import executor as batched_executor
from tilelens.core.engine.batched import plan as batched_plan
from tilelens.core.engine.batched.state import BatchState, Fallback
from tilelens.core.engine.launch_context import LOCAL as _local
from tilelens.core.engine.launch_context import GluonLaunch, LaunchContext, current_launch
from tilelens.core.engine.writelog import WriteLog
from tilelens.errors import StateError

# Interpreted launches share one global interpreter builder in Triton: they must never overlap.
LAUNCH_LOCK = threading.RLock()
_NO_SCOPE = types.SimpleNamespace(restore=lambda: None)  # a skipped language patching: nothing to put back


class _Patcher:
    """Sets attributes (and dict items) and puts every one of them back, last-set first.

    Each (owner, name) is saved once, at its first change: later sets of it only change it, so ``restore``
    brings back the value from before the first, and a patcher that lives long (a recording's tuning mirror,
    set after every launch) holds one entry per attribute, not one per set. ``restore`` puts back every entry
    even if one of them fails, then raises the first failure.
    """

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, bool, Any]] = []
        self._seen: set[tuple[int, str]] = set()  # ids stay valid: _saved holds every owner

    def _save(self, owner: Any, name: str, had: bool, old: Any) -> None:
        if (id(owner), name) not in self._seen:
            self._seen.add((id(owner), name))
            self._saved.append((owner, name, had, old))

    def set(self, owner: Any, name: str, value: Any) -> None:
        self._save(owner, name, name in vars(owner), vars(owner).get(name))
        setattr(owner, name, value)

    def set_class(self, obj: Any, cls: type) -> None:
        """``obj.__class__ = cls`` (a subclass of its class, same layout); ``restore`` puts the class back."""
        self._save(obj, "__class__", True, type(obj))
        obj.__class__ = cls

    def set_item(self, mapping: dict[str, Any], key: str, value: Any) -> None:
        """Like ``set`` for a dict that is no object's ``vars`` (a function's globals)."""
        self._save(mapping, key, key in mapping, mapping.get(key))
        mapping[key] = value

    def keep_item(self, mapping: dict[str, Any], key: str) -> None:
        """Put ``mapping[key]`` back as it is now on ``restore``, whoever changes it meanwhile."""
        self._save(mapping, key, key in mapping, mapping.get(key))

    def restore(self) -> None:
        failure: BaseException | None = None
        while self._saved:
            owner, name, had, old = self._saved.pop()
            try:
                if isinstance(owner, dict):
                    if had:
                        owner[name] = old
                    else:
                        owner.pop(name, None)
                elif had:
                    setattr(owner, name, old)
                elif name in vars(owner):
                    delattr(owner, name)
            except Exception as exc:  # noqa: BLE001 - the others still go back; the first failure is raised
                failure = failure or exc
        self._seen.clear()
        if failure is not None:
            raise failure


def make_interpreted(pyfn: Callable[..., Any]) -> Any:
    """An InterpretedFunction for ``pyfn`` whose rewrite leaves Triton's JIT registry as it was.

    Rewriting builds a throwaway ``JITFunction`` that would replace the user's own in Triton's
    "module:qualname" registry; we put the user's entry back.
    """
    interp = compat.InterpretedFunction(pyfn)
    with jit_registry_kept(pyfn):
        interp.rewrite()
    return interp


@contextlib.contextmanager
def jit_registry_kept(pyfn: Callable[..., Any]) -> Iterator[None]:
    """Triton's registry entry for ``pyfn`` ("module:qualname", Triton 3.8+) as it was, after the block.

    Every ``JITFunction`` constructed registers itself there, replacing the user's kernel of that name; the
    registry only serves to preload specialization data, but it is Triton's, and the user's entry stays.
    """
    registry = compat.jit_registry
    if registry is None:  # Triton 3.6 keeps no registry
        yield
        return
    patcher = _Patcher()
    patcher.keep_item(registry, f"{pyfn.__module__}:{pyfn.__qualname__}")
    try:
        yield
    finally:
        patcher.restore()


def shadow_jit(pyfn: Callable[..., Any]) -> Any:
    """A ``JITFunction`` of ``pyfn`` that Triton's registry does not learn about (identity, compiled replays)."""
    with jit_registry_kept(pyfn):
        return compat.JITFunction(pyfn)


@contextlib.contextmanager
def compiled_mode() -> Iterator[None]:
    """Triton in compiled mode for the block: ``knobs.runtime.interpret`` (and ``TRITON_INTERPRET``) off.

    Every runtime knob and its environment variable is restored after. For replays on a GPU and for kernels
    decorated from a history's source, which must come out as ``JITFunction`` whatever the process runs in.
    """
    with _interpret_knob(False):
        yield


@contextlib.contextmanager
def _interpret_knob(value: bool) -> Iterator[None]:
    """``knobs.runtime.interpret`` (and ``TRITON_INTERPRET``) is ``value`` for the block, then what it was."""
    with compat.runtime_interpret_scope():
        compat.knobs.runtime.interpret = value
        yield


def _semantic_patches(patcher: _Patcher) -> None:
    """Install the compiled-Triton semantics of ``tilelens.core.engine.semantics`` (see there for why), and the
    cheaper front-end internals of ``tilelens.core.engine.frontend`` and ``tilelens.core.engine.fastbinary``."""
    builder_cls = compat.InterpreterBuilder
    module = compat.interpreter_module
    for owner, name, value in frontend.replacements(fastbinary.FAST_TYPE_CHECKING, fastbinary.FAST_BROADCAST):
        patcher.set(owner, name, value)
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
    if compat.INDEX_NEEDS_SQUEEZE:
        name = compat.PATCH_LANG_TENSOR
        patcher.set(module, name, frontend.index_through_squeeze(getattr(module, name)))


def _patch_lang_with_libdevice(original: Callable[..., Any]) -> Callable[..., Any]:
    """The interpreter's per-function language patching, plus libdevice resolution in that function's globals.

    The interpreter calls it for the kernel and for every interpreted helper, so helpers in other modules
    get their libdevice references resolved too; all of it is undone when the launch ends.
    """

    def _patch_lang(fn: Any) -> Any:
        launch = current_launch()
        if launch is None:
            scope = original(fn)
        elif launch.gluon is not None:
            # Gluon code may not name triton.language at all (the stock function asserts it does); the tl
            # patches are needed all the same, since Gluon tensors are tl tensors.
            scope = original(types.SimpleNamespace(__globals__={"tl": compat.tl, "core": compat.tl.core}))
        elif (langs := frontend.lang_modules(fn)) and langs <= launch.lang_patched:
            scope = _NO_SCOPE  # patched in this launch: the stock call would set equal patches again
        else:
            scope = original(fn)
            if type(launch.collector) is not _NoCapture:  # the benchmark's baseline keeps the stock cost
                launch.lang_patched.update(langs)
        if launch is not None and launch.batch is not None and launch.batch_patcher is not None:
            # The stock patching just put its own tensor methods back: the batched attempt's go on top again.
            for owner, name, value in launch.batch_lang:
                launch.batch_patcher.set(owner, name, value)
            if "print" in getattr(getattr(fn, "__code__", None), "co_names", ()):
                # a helper printing from Python would print once, not once per program
                raise Fallback("print")
        if launch is not None:
            fn_globals = getattr(fn, "__globals__", None)
            code = getattr(fn, "__code__", None)
            # Once per function and launch: the interpreter calls this for every helper call, in every loop.
            if fn_globals is not None and code is not None and id(code) not in launch.redirected:
                launch.redirected.add(id(code))
                names = semantics.global_names(code)
                for name, value in semantics.libdevice_redirects(fn_globals, names):
                    launch.patcher.set_item(fn_globals, name, value)
                if launch.gluon is not None:
                    from tilelens.core.engine.gluon import language

                    for name, value in language.global_replacements(fn_globals, names):
                        launch.patcher.set_item(fn_globals, name, value)
        return scope

    return _patch_lang


def _jit_call(original: Callable[..., Any]) -> Callable[..., Any]:
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        launch = current_launch()
        if launch is None:
            return original(self, *args, **kwargs)
        # Keyed by id(): hashing a JITFunction computes its cache_key, which must not happen inside a launch.
        helper = launch.helpers.get(id(self))
        if helper is None:
            helper = launch.helpers[id(self)] = (self, make_interpreted(self.fn))
        return helper[1](*args, **kwargs)

    return __call__


@contextlib.contextmanager
def gluon_simulation(ctx: LaunchContext, options: GluonLaunch) -> Iterator[None]:
    """Run the block's launch in the Gluon simulator (``tilelens.core.engine.gluon``); all of it is undone on exit.

    * the interpreter's semantic (which its ``tl`` patches pass to every builtin) becomes the simulator's, and
      so does the one Gluon's builtins get (``language.ACTIVE``);
    * every builtin of Gluon's language modules and classes is replaced by a call with that semantic;
    * the interpreter's reductions and scans give their results Gluon layouts;
    * the grid executor recognises ``gl.constexpr`` parameters;
    * Gluon's host TMA descriptors are copied to the host and back like tensors, and converted to descriptor
      values like Triton's own.
    """
    from tilelens.core.engine import gluon
    from tilelens.core.engine.gluon import descriptors, executor, language, reductions

    module = compat.interpreter_module

    def thread_init() -> None:  # warp_specialize runs partitions in threads of their own
        _local.launch = ctx

    patcher = _Patcher()
    try:
        semantic = gluon.new_semantic(
            module.interpreter_builder,
            num_warps=options.num_warps,
            record_shared=ctx.collector.record_shared,
            thread_init=thread_init,
        )
        patcher.set(language.ACTIVE, "semantic", semantic)
        patcher.set(module, "interpreter_semantic", semantic)
        if not compat.INTERPRETER_SEMANTIC_IS_GLOBAL:
            patcher.set(module, "_patch_attr", language.patch_attr(module))
        for owner, name, value in language.replacements():
            patcher.set(owner, name, value)
        patcher.set(compat.ReduceOps, "apply", reductions.reduce_apply(compat.ReduceOps.apply))
        patcher.set(compat.ScanOps, "apply", reductions.scan_apply(compat.ScanOps.apply))
        patcher.set(module, "_implicit_cvt", descriptors.implicit_cvt(module._implicit_cvt))
        grid = module.GridExecutor
        patcher.set(grid, "__init__", executor.grid_executor_init(grid.__init__))
        patcher.set(grid, "_init_args_hst", descriptors.init_args_hst(grid._init_args_hst))
        patcher.set(grid, "_restore_args_dev", descriptors.restore_args_dev(grid._restore_args_dev))
        patcher.set(ctx, "gluon", options)
        yield
    finally:
        patcher.restore()


@contextlib.contextmanager
def launch_patches(
    collector: AccessCollector, gluon: GluonLaunch | None = None, writes: WriteLog | None = None
) -> Iterator[LaunchContext]:
    """Interpret one launch with access capture; everything touched is restored on exit.

    With ``gluon`` the launch is a Gluon kernel's, simulated (``gluon_simulation``). With ``writes`` every
    store and atomic notes the old bytes of the lanes it writes there first (:mod:`tilelens.core.engine.writelog`).
    """
    with LAUNCH_LOCK:
        if current_launch() is not None:
            raise StateError("TileLens: a Triton launch started inside another interpreted launch")
        patcher = _Patcher()
        lang_snapshot = [(ns, dict(vars(ns))) for ns in compat.LANG_NAMESPACES]
        builder_cls = compat.InterpreterBuilder
        ctx = LaunchContext(collector, patcher, _local.reads)
        ctx.writes = writes
        try:
            with _interpret_knob(True):
                _semantic_patches(patcher)
                # Taken after the semantic patches, so accesses are captured around their versions too.
                originals = {name: getattr(builder_cls, name) for name in compat.ACCESS_METHODS}
                for name, hook in memhooks.access_hooks(originals, current_launch).items():
                    patcher.set(builder_cls, name, hook)
                patcher.set(compat.JITFunction, "__call__", _jit_call(compat.JITFunction.__call__))
                if gluon is None:
                    grid_cls = compat.interpreter_module.GridExecutor
                    patcher.set(grid_cls, "__call__", _batched_grid_call(grid_cls.__call__))
                simulation = gluon_simulation(ctx, gluon) if gluon is not None else contextlib.nullcontext()
                with simulation:
                    _local.launch = ctx
                    try:
                        yield ctx
                    finally:
                        _local.launch = None
        finally:
            patcher.restore()
            _restore_namespaces(lang_snapshot)


def _batched_grid_call(original: Callable[..., Any]) -> Callable[..., Any]:
    """``GridExecutor.__call__`` with the kernel function replaced by a ``BatchedEntry`` for the call."""

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        launch = current_launch()
        if launch is None or launch.gluon is not None:
            return original(self, *args, **kwargs)
        builder = compat.interpreter_module.interpreter_builder
        install = functools.partial(batched_patches, launch)
        entry = batched_executor.BatchedEntry(self.fn, launch, builder, install)
        patcher = _Patcher()
        try:
            patcher.set(self, "fn", entry)
            return original(self, *args, **kwargs)
        finally:
            patcher.restore()
            launch.engine = entry.outcome
            launch.lang_patched.clear()  # this call's language patches are undone now: none to skip

    return __call__


@contextlib.contextmanager
def batched_patches(ctx: LaunchContext, state: BatchState, writes: WriteLog) -> Iterator[None]:
    """The interpreter as the batched attempt ``state`` runs it (:mod:`tilelens.core.engine.batched`), for the block.

    The builder's methods become their batched versions (the builder takes the state's subclass, calling the
    methods installed: access hooks, semantic fixes), reductions and scans learn the program axis, ``tl.tensor``'s
    ``__bool__``/``__index__`` check that the programs agree, ``static_print`` gives up, the builder's
    ``grid_idx`` says "every program" to the access hooks, and ``writes`` notes every write for a rollback.
    """
    patcher = _Patcher()
    try:
        cls, changes, lang = batched_plan.replacements(state, ctx.collector)
        builder = compat.interpreter_module.interpreter_builder
        patcher.set_class(builder, cls)
        for owner, name, value in changes + lang:
            patcher.set(owner, name, value)
        patcher.set(builder, "grid_idx", BATCH_PROGRAM)
        patcher.set(ctx, "writes", writes)
        if ctx.reads is not None:
            patcher.set(ctx, "reads", batched_executor.BatchedReads(ctx.reads, state.programs, ctx.collector))
        patcher.set(ctx, "batch_lang", lang)
        patcher.set(ctx, "batch_patcher", patcher)
        patcher.set(ctx, "batch", state)
        yield
    finally:
        patcher.restore()


@contextlib.contextmanager
def attribute_replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.<name>`` is ``value`` for the block, then what it was, also on error: an interpreted kernel's
    ``pre_run_hooks`` (the interpreter calls them with its host copies of the arguments, just before the
    programs run)."""
    patcher = _Patcher()
    try:
        patcher.set(owner, name, value)
        yield
    finally:
        patcher.restore()


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
KindRouter = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]


def in_autotune_bench() -> bool:
    """Whether this thread is inside an autotuner's benchmark of one config (a trial launch)."""
    return _local.bench_depth > 0


def _marking_bench(original: Callable[..., Any]) -> Callable[..., Any]:
    """``Autotuner._bench`` marking the thread as inside a benchmark (its launches are trials)."""

    def _bench(self: Any, *args: Any, **kwargs: Any) -> Any:
        _local.bench_depth = _local.bench_depth + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _local.bench_depth -= 1

    return _bench


@contextlib.contextmanager
def interception_patches(
    route: LaunchRouter,
    *,
    mark_trials: bool = False,
    direct: dict[str, KindRouter] | None = None,
) -> Iterator[None]:
    """Send every kernel launch to ``route(kernel, kind, args, kwargs)`` while the block runs.

    Layers that TileLens already traced (marked with ``_tilelens_trace``) and launches made from inside an
    interpreted launch keep Triton's own behaviour, so the traced chain runs exactly as Triton would run it.
    ``mark_trials`` (compiled recordings) wraps ``Autotuner._bench``: :func:`in_autotune_bench` tells benchmark
    launches from the program's; Triton's benchmark itself is unchanged. ``direct`` maps a kind ("jit",
    "autotuner", "heuristics") to ``fn(kernel, args, kwargs)`` called instead of ``route`` for that kind: one
    Python call less per launch, which a compiled recording's launch-bound program feels."""
    patcher = _Patcher()
    direct = direct or {}

    def layered(cls: Any, kind: str) -> Callable[..., Any]:
        original = cls.run  # cls: one of Triton's (untyped) classes
        to = direct.get(kind)
        if to is not None:

            def run_direct(self: Any, *args: Any, **kwargs: Any) -> Any:
                # current_launch() inlined: this runs for every launch of a compiled recording
                if getattr(self, "_tilelens_trace", None) is not None or _local.launch is not None:
                    return original(self, *args, **kwargs)
                if kwargs.get("warmup"):
                    return original(self, *args, **kwargs)
                return to(self, args, kwargs)

            run_direct.__wrapped__ = original  # type: ignore[attr-defined]
            return run_direct

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
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
        if mark_trials:
            bench = compat.AUTOTUNER_BENCH
            patcher.set(compat.Autotuner, bench, _marking_bench(getattr(compat.Autotuner, bench)))
        yield
    finally:
        patcher.restore()


def original_run(cls: type) -> Callable[..., Any]:
    """The class's ``run`` as Triton defines it, even while interception is installed."""
    for klass in cls.__mro__:
        if "run" in vars(klass):
            run = vars(klass)["run"]
            return cast("Callable[..., Any]", getattr(run, "__wrapped__", run))
    raise AttributeError(f"{cls.__name__} has no run method")


# -- tracing a kernel chain --------------------------------------------------------------------------------


def rewire_chain(
    layers: list[Any],
    leaf: Any,
    *,
    in_place: bool,
    bench: Callable[[], Any],
    tuner_run: Callable[[Any], Callable[..., Any]],
) -> list[Any]:
    """Make a kernel's ``Autotuner``/``Heuristics`` layers lead to ``leaf``; return the layers so rewired.

    Each layer's ``.fn`` becomes the next layer (the last one's, ``leaf``), and is marked with
    ``_tilelens_trace = leaf`` (interception lets such layers run as Triton runs them). Autotuners also get
    ``cache_results = False`` (dummy timings must never reach Triton's disk cache), a benchmarker made by
    ``bench`` (it shadows Triton's ``do_bench`` on the instance), and ``run = tuner_run(autotuner)``.

    With ``in_place`` these are the user's own layers, changed for good: that is what ``@tilelens.trace``
    asks for. Otherwise they are shallow copies, each autotuner with its own copy of the cache, so the user's
    objects are not touched and dummy choices never flow back. Either way all or nothing: if a change fails,
    the ones made before it are undone.
    """
    if not in_place:
        layers = [copy.copy(layer) for layer in layers]
    patcher = _Patcher()
    try:
        for outer, inner in zip(layers, [*layers[1:], leaf]):
            if not in_place and isinstance(outer, compat.Autotuner):
                patcher.set(outer, "cache", dict(outer.cache))
            patcher.set(outer, "fn", inner)
            patcher.set(outer, "_tilelens_trace", leaf)
            if isinstance(outer, compat.Autotuner):
                patcher.set(outer, "cache_results", False)
                patcher.set(outer, "do_bench", bench())
                patcher.set(outer, "run", tuner_run(outer))
    except BaseException:
        patcher.restore()
        raise
    return layers


# What Autotuner.run leaves on the autotuner for the program to read.
TUNING_STATE = ("best_config", "configs_timings", "bench_time")


class TuningMirror:
    """The user's autotuners show what their traced copies decided, until :meth:`restore`.

    Inside ``tilelens.record()`` launches run on copies of the user's kernel layers (the copies keep their own
    cache, so dummy choices never outlive the recording), yet programs read ``kernel.best_config`` after a
    launch. After each launch :meth:`show` copies :data:`TUNING_STATE` from each copied autotuner onto the
    user's; :meth:`restore` (when the recording ends) puts every attribute back as it was before the first.
    """

    def __init__(self) -> None:
        self._patcher = _Patcher()

    def show(self, user_layers: list[Any], copied_layers: list[Any]) -> None:
        for user, copied in zip(user_layers, copied_layers):
            if user is copied or not isinstance(user, compat.Autotuner):
                continue
            for name in TUNING_STATE:
                if name in vars(copied):
                    self._patcher.set(user, name, vars(copied)[name])

    def restore(self) -> None:
        self._patcher.restore()
