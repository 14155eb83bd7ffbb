"""The calls around a compiled recording's launch in C++ (``native_calls.cpp``): ``Intercept``, Triton's ``run``
methods intercepted without a Python frame, and ``Tuner``, an autotuner's call framed as
``CompiledRouter.tune`` frames it. Each must do what its Python counterpart does, exceptions included, and a
recording through them stores what the Python path stores (``TILELENS_NATIVE=0``)."""

from __future__ import annotations

import gc
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from sqlalchemy import select
from triton import knobs

import tilelens
from tilelens.core import compat, compiled_native, interpreter
from tilelens.core.compiled import CompiledRouter
from tilelens.core.compiled_frames import Frame, key_values
from tilelens.core.compiled_kernel import RESERVED_SET
from tilelens.core.thread_state import LOCAL
from tilelens.store import History
from tilelens.store.models import AutotuneEventRow, Launch

from .test_compiled_fast_path import tuned_add
from .test_compiled_recording import scale_kernel
from .test_compiled_templates import StableTritonLike, _all_rows

# -- Intercept ---------------------------------------------------------------------------------------------


class Layer:
    """Stands for one of Triton's kernel classes: ``run`` is what the interception replaces."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        calls.append(("original", self, args, kwargs))
        return "original result"


calls: list[tuple[Any, ...]] = []
ORIGINAL_RUN = Layer.run


def target(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    calls.append(("target", obj, args, kwargs))
    return "target result"


@pytest.fixture
def intercepted(native_module: Any) -> Any:
    original = Layer.run
    Layer.run = native_module.Intercept(original, target, LOCAL)  # type: ignore[method-assign]
    calls.clear()
    try:
        yield Layer.run
    finally:
        Layer.run = original  # type: ignore[method-assign]
        LOCAL.launch = None


def test_an_intercepted_call_goes_to_the_target_with_a_fresh_tuple_and_dict(intercepted: Any) -> None:
    layer, grid = Layer(), (3,)
    assert layer.run(1, 2.0, grid=grid, warmup=False, BLOCK=16) == "target result"
    assert calls == [("target", layer, (1, 2.0), {"grid": grid, "warmup": False, "BLOCK": 16})]
    bound = layer.run  # a bound method too, as Python makes for a function
    assert bound() == "target result" and calls[-1] == ("target", layer, (), {})
    assert layer.run(7, grid=None) == "target result" and calls[-1][2:] == ((7,), {"grid": None})
    # On the class: the interception itself, with Triton's own run as __wrapped__ (interpreter.original_run)
    assert Layer.run is intercepted and intercepted.__wrapped__ is ORIGINAL_RUN
    assert interpreter.original_run(Layer) is ORIGINAL_RUN


def test_traced_layers_interpreted_launches_and_warmups_keep_tritons_own_run(intercepted: Any) -> None:
    traced = Layer()
    traced._tilelens_trace = object()  # type: ignore[attr-defined]
    assert traced.run(1, grid=(1,)) == "original result"
    assert calls[-1] == ("original", traced, (1,), {"grid": (1,)})
    plain = Layer()
    assert plain.run(2, warmup=True) == "original result" and calls[-1][2:] == ((2,), {"warmup": True})
    assert plain.run(2, warmup=0) == "target result"  # falsy, as ``kwargs.get("warmup")`` reads it
    LOCAL.launch = object()  # an interpreted launch runs on this thread
    assert plain.run(3) == "original result"
    LOCAL.launch = None
    assert plain.run(3) == "target result"
    not_traced = Layer()
    not_traced._tilelens_trace = None  # type: ignore[attr-defined]
    assert not_traced.run() == "target result"


def test_a_layer_found_unmarked_is_looked_at_again_once_tilelens_marks_a_layer(intercepted: Any) -> None:
    """The interception remembers layers it found without ``_tilelens_trace`` (one attribute miss per layer,
    not per launch) until TileLens adds a mark (``rewire_chain`` tells it, ``marks_added``): a layer marked
    after it was launched keeps Triton's own run from then on, and others still go to the target."""
    layer, other = Layer(), Layer()
    assert layer.run(1) == "target result" and other.run(1) == "target result"
    assert layer.run(2) == "target result"  # remembered
    interpreter.rewire_chain([layer], object(), in_place=True, bench=object, tuner_run=lambda t: t.run)
    assert layer.run(3) == "original result" and calls[-1] == ("original", layer, (3,), {})
    assert other.run(3) == "target result"
    del layer._tilelens_trace, layer.fn  # type: ignore[attr-defined]
    assert layer.run(4) == "target result"  # a mark taken away needs no word: it is looked at again


def test_the_interception_sees_each_change_of_the_thread_state_and_keeps_no_launch(intercepted: Any) -> None:
    """The interception keeps the thread-state values it read until a ``NotifyingLocal`` announces a change:
    each change on this thread is seen by the next call, and an interpreted launch's context is not kept once
    the thread lets go of it."""
    import weakref

    class Context:
        pass

    plain = Layer()
    assert plain.run(1) == "target result" and plain.run(2) == "target result"  # None, kept
    context = Context()
    alive = weakref.ref(context)
    LOCAL.launch = context
    assert plain.run(3) == "original result"
    LOCAL.launch = None
    del context
    assert alive() is None
    assert plain.run(4) == "target result"
    del LOCAL.launch  # back to the class default
    assert plain.run(5) == "target result"
    LOCAL.launch = object()
    assert plain.run(6) == "original result"


def test_each_thread_sees_its_own_thread_state_through_the_kept_dict(intercepted: Any) -> None:
    """The interception keeps the last asking thread's ``__dict__`` of the thread state: calls alternating
    between a thread inside an interpreted launch and one outside must each see their own state, and a
    thread that never set ``launch`` the class default (None)."""
    import threading

    plain = Layer()
    inside, outside = threading.Event(), threading.Event()
    seen: dict[str, list[str]] = {"inside": [], "outside": []}

    def run(name: str, mine: threading.Event, other: threading.Event, launch: object | None) -> None:
        if launch is not None:
            LOCAL.launch = launch
        for _ in range(4):  # strictly alternating: every call follows the other thread's
            mine.wait(5)
            mine.clear()
            seen[name].append(plain.run(name))
            other.set()

    a = threading.Thread(target=run, args=("inside", inside, outside, object()))
    b = threading.Thread(target=run, args=("outside", outside, inside, None))
    a.start(), b.start()
    inside.set()
    a.join(10), b.join(10)
    assert seen == {"inside": ["original result"] * 4, "outside": ["target result"] * 4}
    assert plain.run(0) == "target result"  # this thread never set it either
    LOCAL.launch = object()
    assert plain.run(0) == "original result"  # and sees its own change at once


def test_an_intercepted_calls_exception_is_passed_on_unchanged(native_module: Any) -> None:
    raised = KeyError("from the target")

    def failing(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise raised

    original = Layer.run
    Layer.run = native_module.Intercept(original, failing, LOCAL)  # type: ignore[method-assign]
    try:
        with pytest.raises(KeyError) as caught:
            Layer().run(1)
        assert caught.value is raised
    finally:
        Layer.run = original  # type: ignore[method-assign]


def test_interception_installs_the_compiled_run_for_direct_kinds_and_removes_it(native_module: Any) -> None:
    jit_run, tuner_run = compat.JITFunction.run, compat.Autotuner.run
    routes = {"jit": target, "autotuner": target}
    with interpreter.interception_patches(lambda *a: None, direct=routes):
        assert type(compat.JITFunction.run) is native_module.Intercept
        assert compat.JITFunction.run.__wrapped__ is jit_run
        assert compat.Autotuner.run.__wrapped__ is tuner_run
        # What compat.run_compiled and the router call as Triton's own run, through ``__wrapped__``.
        assert interpreter.original_run(compat.JITFunction) is jit_run
        assert interpreter.original_run(compat.Autotuner) is tuner_run
    assert compat.JITFunction.run is jit_run and compat.Autotuner.run is tuner_run


def test_an_interception_referring_to_itself_is_collected(native_module: Any) -> None:
    holder = types.SimpleNamespace()
    ic = native_module.Intercept(Layer.run, holder, LOCAL)
    holder.ic = ic
    kind, where = type(ic), id(ic)
    del ic, holder
    gc.collect()
    assert not any(type(o) is kind and id(o) == where for o in gc.get_objects())


# -- Tuner -------------------------------------------------------------------------------------------------


class FakeTuner:
    """What the router's ``tune`` reads of an autotuner: ``configs``, ``cache``, ``arg_names``, ``keys``."""

    def __init__(self, configs: int = 2) -> None:
        self.configs = list(range(configs))
        self.cache: dict[Any, Any] = {}
        self.arg_names = ["x", "n", "m", "alpha"]
        self.keys = ["n", "m"]


def _router() -> tuple[CompiledRouter, list[tuple[Any, ...]]]:
    """A router whose tuner ``run`` is a spy: it notes the frames on the stack while it runs."""
    router = CompiledRouter(sink=types.SimpleNamespace())
    seen: list[tuple[Any, ...]] = []

    def run(tuner: Any, *args: Any, **kwargs: Any) -> Any:
        stack = router._local.stack
        seen.append(
            (tuner, args, kwargs, [Frame(**{f: getattr(x, f) for f in Frame.__slots__}) for x in stack])
        )
        action = kwargs.get("action") or getattr(tuner, "action", None)
        if action is not None:
            return action(tuner, args)
        return ("ran", args)

    router._tuner_run = run
    router._tuned = lambda *a: seen.append(("tuned", *a))  # type: ignore[method-assign]
    return router, seen


def _compiled_tuner(native_module: Any, router: CompiledRouter) -> Any:
    tuner = native_module.Tuner(router.tune)
    tuner.configure(router._tuner_plans, router._local, router._tuner_run, router._tuned, Frame, RESERVED_SET)
    return tuner


def test_the_compiled_tuner_frames_a_call_exactly_as_the_router_does(native_module: Any) -> None:
    seen_by: dict[str, list[Any]] = {}
    fake, single = FakeTuner(), FakeTuner(configs=1)
    for name in ("python", "compiled"):
        router, seen = _router()
        call = router.tune if name == "python" else _compiled_tuner(native_module, router)
        router._local.stack = []
        router.tune(fake, ("x0", 4, 5, 0.5), {})  # the router makes the tuner's plan at its first call
        results = [
            call(fake, ("x1", 8, 9, 1.5), {"grid": (2,), "warmup": False}),
            call(fake, ("x2", 8, 9), {}),
            call(single, ("x3",), {"grid": (1,)}),
        ]
        assert results == [("ran", ("x1", 8, 9, 1.5)), ("ran", ("x2", 8, 9)), ("ran", ("x3",))]
        assert router._local.stack == []
        seen_by[name] = seen[1:]
    assert seen_by["compiled"] == seen_by["python"]
    frames = [s[3] for s in seen_by["compiled"]]
    assert frames[0] == [Frame(fake, tuner=True, tuned=True, args=("x1", 8, 9, 1.5), positions=(1, 2))]
    assert frames[1] == [Frame(fake, tuner=True, tuned=True, args=("x2", 8, 9), positions=(1, 2))]
    assert [key_values(f[0]) for f in frames[:2]] == [(4, (8, 9)), (3, (8, 9))]
    assert frames[2] == [Frame(single, tuner=True)]  # one config: no key


def test_the_compiled_tuner_keeps_each_tuners_plan_apart(native_module: Any) -> None:
    """It keeps the plans it found by their tuner's address: calls alternating among more tuners than it
    keeps, with different key positions, are each framed with their own tuner's plan, as the router frames
    them. With a reserved set lacking "warmup", a call passing ``warmup`` is the router's."""
    tuners = [FakeTuner() for _ in range(6)]
    for i, t in enumerate(tuners):
        t.keys = [["n"], ["m"], ["n", "m"]][i % 3]
    seen_by: dict[str, list[Any]] = {}
    counts = None
    for name in ("python", "compiled"):
        router, seen = _router()
        call = router.tune if name == "python" else _compiled_tuner(native_module, router)
        router._local.stack = []
        for t in tuners:
            router.tune(t, ("x0", 1, 2), {})  # the router makes each tuner's plan
        for r in range(3):
            for j, t in enumerate(tuners):
                call(t, (f"x{r}", j, r + 10), {"grid": (1,), "warmup": False})
        seen_by[name] = seen[len(tuners) :]
        if name == "compiled":
            counts = (call.steady, call.fallbacks)
    assert seen_by["compiled"] == seen_by["python"]
    assert counts == (18, 0)
    frames = [s[3][0] for s in seen_by["compiled"]]
    assert [key_values(f) for f in frames[:3]] == [(3, (0,)), (3, (10,)), (3, (2, 10))]

    router, seen = _router()
    tuner = native_module.Tuner(router.tune)
    tuner.configure(
        router._tuner_plans, router._local, router._tuner_run, router._tuned, Frame, frozenset({"grid"})
    )
    router._local.stack = []
    router.tune(tuners[0], ("x0", 1, 2), {})
    tuner(tuners[0], ("x1", 1, 2), {"grid": (1,)})
    tuner(tuners[0], ("x1", 1, 2), {"grid": (1,), "warmup": False})
    assert (tuner.steady, tuner.fallbacks) == (1, 1)


def test_the_compiled_tuner_reuses_a_frame_no_one_kept_and_lets_go_of_what_it_held(
    native_module: Any,
) -> None:
    """A call's frame that no one holds when the call ends is emptied and framed the next call (no frame is
    allocated and freed per call); a frame someone kept is left whole, and the next call gets a new one. An
    emptied frame holds nothing of its call: the call's arguments are freed when the program drops them."""
    import weakref

    router, _ = _router()
    tuner = _compiled_tuner(native_module, router)
    fake = FakeTuner()
    router._local.stack = []
    router.tune(fake, ("x0", 4, 5), {})  # the router makes the tuner's plan
    frames: list[int] = []
    kept: list[Frame] = []

    def run(t: Any, *args: Any, **kwargs: Any) -> Any:
        frame = router._local.stack[-1]
        frames.append(id(frame))
        if kwargs.get("keep"):
            kept.append(frame)
        return key_values(frame)

    class Arg:
        pass

    router._tuner_run = run
    tuner.configure(router._tuner_plans, router._local, run, router._tuned, Frame, RESERVED_SET | {"keep"})

    def spare() -> int:
        frame = tuner.spare
        assert type(frame) is Frame and not any(hasattr(frame, name) for name in Frame.__slots__)
        return id(frame)  # the tuner holds it: no other object has this id meanwhile

    arg = Arg()
    alive = weakref.ref(arg)
    assert tuner.spare is None
    assert tuner(fake, (arg, 8, 9), {}) == (3, (8, 9))
    del arg
    assert alive() is None  # the emptied frame does not hold the call's arguments
    first = spare()
    assert tuner(fake, ("x2", 10, 11), {}) == (3, (10, 11))
    assert tuner(fake, ("x3", 12, 13), {"keep": True}) == (3, (12, 13))
    assert frames[1:] == [first, first]  # framed anew each call
    assert tuner.spare is None  # the kept one stays the keeper's, whole
    assert kept[0].args == ("x3", 12, 13) and key_values(kept[0]) == (3, (12, 13)) and kept[0].tuner
    assert tuner(fake, ("x4", 14, 15), {}) == (3, (14, 15))
    assert frames[3] != first and spare() == frames[3]
    assert (tuner.steady, tuner.fallbacks) == (4, 0)


def test_a_call_the_compiled_tuner_cannot_frame_goes_to_the_router(native_module: Any) -> None:
    router, seen = _router()
    tuner = _compiled_tuner(native_module, router)
    fake = FakeTuner()
    router._local.stack = []
    tuner(fake, ("x", 1, 2), {})  # no plan yet: the router's, which makes it
    tuner(fake, ("x", 1), {})  # too few arguments for the key positions
    tuner(fake, ("x", 1, 2), {"m": 3})  # a key argument given by name
    assert (tuner.steady, tuner.fallbacks) == (0, 3)
    tuner(fake, ("x", 1, 2), {"grid": 1})
    assert (tuner.steady, tuner.fallbacks) == (1, 3)
    tuner.configure()
    assert not tuner.enabled
    tuner(fake, ("x", 1, 2), {})
    assert (tuner.steady, tuner.fallbacks) == (1, 3) and len(seen) == 5  # all five ran, framed by someone
    with pytest.raises(TypeError, match="slots only"):
        tuner.configure({}, router._local, router._tuner_run, router._tuned, Layer, RESERVED_SET)


def test_a_fresh_key_in_the_cache_reaches_tuned_also_when_the_run_raises(native_module: Any) -> None:
    router, seen = _router()
    tuner = _compiled_tuner(native_module, router)
    fake = FakeTuner()
    router._local.stack = []
    router.tune(fake, ("x", 1, 2), {})
    raised = ValueError("the tuning failed")

    def tune_then_fail(t: Any, args: tuple[Any, ...]) -> Any:
        t.cache[args[1:3]] = "config"
        raise raised

    fake.action = tune_then_fail  # type: ignore[attr-defined]
    with pytest.raises(ValueError) as caught:
        tuner(fake, ("x", 3, 4), {})
    assert caught.value is raised and router._local.stack == []
    kind, layer, frame, timings_before, cache = seen[-1]
    assert (kind, layer, cache, timings_before) == ("tuned", fake, {(3, 4): "config"}, None)
    assert key_values(frame) == (3, (3, 4)) and frame.tuned

    failure = RuntimeError("the event failed")

    def failing_event(*a: Any) -> None:
        raise failure

    tuner.configure(router._tuner_plans, router._local, router._tuner_run, failing_event, Frame, RESERVED_SET)
    with pytest.raises(RuntimeError) as caught_event:
        tuner(fake, ("x", 5, 6), {})
    # As Python's ``finally`` does: the event's exception, chained to the run's.
    assert caught_event.value is failure and failure.__context__ is raised
    fake.action = lambda t, args: "no new key"  # type: ignore[attr-defined]
    assert tuner(fake, ("x", 5, 6), {}) == "no new key" and router._local.stack == []


# -- recordings through them ---------------------------------------------------------------------------------


def _tuned_kernel(timings: dict[int, list[float]], benched: list[int]) -> Any:
    def bench(kernel_call: Any, quantiles: Any = None) -> list[float]:
        kernel_call()
        return list(timings[benched[-1]])

    with knobs.runtime.scope():
        knobs.runtime.interpret = False

        @triton.autotune(
            configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"], do_bench=bench
        )
        @triton.jit
        def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)

    return tuned


def test_tunings_and_launch_options_through_the_compiled_calls_store_the_python_paths_rows(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = {}
    # "1": the autotuner's launches framed from its Python frame; "framed": every autotuner call intercepted
    # and framed by the compiled tuner; "0": by the Python router.
    for native in ("1", "framed", "0"):
        monkeypatch.setenv("TILELENS_NATIVE", "0" if native == "0" else "1")
        monkeypatch.setattr(compiled_native, "CALLER_FRAMES", native == "1")
        timings = {16: [3.0, 2.5, 3.5], 32: [1.0, 0.5, 1.5]}
        benched: list[int] = []
        tuned = _tuned_kernel(timings, benched)
        runner = StableTritonLike()
        original = runner.__call__

        def spy(
            jit: Any, args: Any, grid: Any, kwargs: Any, original: Any = original, b: Any = benched
        ) -> Any:
            b.append(kwargs.get("BLOCK", 0))
            return original(jit, args, grid, kwargs)

        spy.binds_like_triton = True  # type: ignore[attr-defined]
        x, y = torch.arange(64, dtype=torch.float32), torch.zeros(64)
        db, blobs = tmp_path / f"n{native}.db", tmp_path / f"n{native}"
        with tilelens.Recording(str(db), blobs, backend="compiled", snapshots="none", runner=spy) as rec:
            router = rec._compiled
            assert router is not None
            for n in (64, 64, 48, 48, 64):  # the 48s are a fresh key: tuned again, inside the tuner's frame
                tuned[lambda m, n=n: (triton.cdiv(n, m["BLOCK"]),)](x, y, n)
            for options in ({"num_warps": 2}, {"num_warps": 2, "num_stages": 1}, {"num_stages": 1}):
                for _ in range(2):
                    scale_kernel[(3,)](x, y, 40, 2.0, BLOCK=16, **options)
            counts = (
                (
                    router._tuner.caller_framed,
                    router._tuner.steady,
                    router._tuner.fallbacks,
                    router._launcher.steady,
                    router._launcher.fallbacks,
                )
                if native != "0"
                else None
            )
            caller_framed = compat.Autotuner.run is interpreter.original_run(compat.Autotuner)
        assert rec.write_failure is None and len(rec.launch_ids) == 11
        with History.open(str(db), blobs) as h, h.session() as s:
            events = [
                (e.tuning_key, e.timings, e.configs, e.chosen, e.cache_hit, e.launch_id)
                for e in s.execute(select(AutotuneEventRow).order_by(AutotuneEventRow.id)).scalars()
            ]
            keys = s.execute(select(Launch.tuning_key).order_by(Launch.seq)).scalars().all()
        stored[native] = (_all_rows(db, blobs), events, keys, benched, counts, caller_framed)
    rows, events, keys, benched, counts, caller_framed = stored["1"]
    assert (rows, events, keys, benched) == stored["0"][:4] == stored["framed"][:4]
    # Framed from its Python frame, every call of the autotuner ran Triton's own run, not intercepted; its
    # five launches were framed in C++. The launcher finished each launch of a template already made
    # (options included: one, two, another one); the first of each template and the four benchmark launches
    # went to the router.
    assert counts == (5, 0, 0, 6, 9) and caller_framed is (compat.AUTOTUNER_RUN_CODE is not None)
    # Intercepted, the first call of the autotuner made its plan in Python; the four after it were framed
    # in C++.
    assert stored["framed"][4] == (0, 4, 1, 6, 9) and stored["framed"][5] is False
    assert [e[0] for e in events] == [
        "(64, 'torch.float32', 'torch.float32')",
        "(48, 'torch.float32', 'torch.float32')",
    ]
    assert [e[1] for e in events] == [[[3.0, 2.5, 3.5], [1.0, 0.5, 1.5]]] * 2
    assert keys[:5] == [events[0][0]] * 2 + [events[1][0]] * 2 + [events[0][0]]
    options = [r[0]["config"]["options"] for r in rows[5:]]
    assert (
        options == [{"num_warps": 2}] * 2 + [{"num_warps": 2, "num_stages": 1}] * 2 + [{"num_stages": 1}] * 2
    )


def test_the_launcher_calls_tritons_own_run_directly_and_stores_the_python_paths_rows(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With Triton's runner (``compat.run_compiled``), a steady launch calls Triton's ``JITFunction.run``
    itself, with the keyword arguments the call came with (``grid`` the probe, ``warmup`` False); here that
    ``run`` is a stand-in of Triton's signature doing the stand-in runner's work."""
    stored, callers = {}, {}
    for native in ("1", "0"):
        monkeypatch.setenv("TILELENS_NATIVE", native)
        runner = StableTritonLike()
        seen: list[str] = []

        def triton_run(
            self: Any,
            *args: Any,
            grid: Any,
            warmup: Any,
            seen: Any = seen,
            runner: Any = runner,
            **kwargs: Any,
        ) -> Any:
            assert warmup is False
            seen.append(sys._getframe(1).f_code.co_name)
            return runner(self, args, grid, kwargs)

        monkeypatch.setattr(compat.JITFunction, "run", triton_run)
        x = torch.arange(40, dtype=torch.float32)
        outs = [torch.zeros(40) for _ in range(3)]
        tuned_add.cache.clear()
        tuned_add.cache[(40, "torch.float32", "torch.float32")] = tuned_add.configs[0]
        db, blobs = tmp_path / f"n{native}.db", tmp_path / f"n{native}"
        with tilelens.Recording(str(db), blobs, backend="compiled", snapshots="none") as rec:
            router = rec._compiled
            assert router is not None and router.runner is compat.run_compiled
            for i in range(4):
                scale_kernel[(3,)](x, outs[0], 40 - i, 2.0, BLOCK=16)
            for _ in range(3):
                scale_kernel[(3,)](x, outs[1], 40, 3.0, BLOCK=16, num_warps=2, num_stages=1)
            for i in range(3):
                tuned_add[(2,)](x, outs[2], 40, 0.5 * i)
            counts = (router._launcher.steady, router._launcher.fallbacks) if native == "1" else None
        assert rec.write_failure is None and len(rec.launch_ids) == 10
        stored[native] = (outs, _all_rows(db, blobs), counts)
        callers[native] = seen
    (outs, rows, counts), (py_outs, py_rows, _) = stored["1"], stored["0"]
    assert all(torch.equal(a, b) for a, b in zip(outs, py_outs)) and rows == py_rows
    assert torch.equal(outs[0], x * 2.0) and torch.equal(outs[1], x * 3.0)
    assert counts == (7, 3)  # each kernel's first launch is the router's
    assert callers["0"] == ["run_compiled"] * 10
    # Each kernel's first launch went to the router before it ran, through run_compiled; every other launch
    # was run by the launcher, which called Triton's run itself (the options' new template too, handed to
    # the router only after it ran); the autotuned kernel's from the tuner's own ``run``.
    assert callers["1"] == ["run_compiled"] + ["<lambda>"] * 6 + ["run_compiled", "run", "run"]


def test_an_intercepted_autotuner_call_reaches_the_tuner_and_triton_as_it_arrived(native_module: Any) -> None:
    """``Intercept`` hands a ``Tuner`` the call's own arguments (no tuple and dict of its own); the tuner passes
    them on to the autotuner's ``run`` unchanged, few or many (past its 64-slot stack it makes the dict)."""
    router, seen = _router()
    tuner = _compiled_tuner(native_module, router)
    router._local.stack = []

    class Tuned(FakeTuner):
        pass

    Tuned.run = native_module.Intercept(lambda *a, **k: "original", tuner, LOCAL)  # type: ignore[attr-defined]
    single = Tuned(configs=1)
    assert single.run(1, 2.5, grid=(3,), warmup=False, num_warps=4) == ("ran", (1, 2.5))  # type: ignore[attr-defined]
    many = tuple(range(70))
    assert single.run(*many, grid=(1,), warmup=False) == ("ran", many)  # type: ignore[attr-defined]
    assert [(s[1], s[2]) for s in seen] == [
        ((1, 2.5), {"grid": (3,), "warmup": False, "num_warps": 4}),
        (many, {"grid": (1,), "warmup": False}),
    ]
    assert [s[3] for s in seen] == [[Frame(single, tuner=True)]] * 2 and router._local.stack == []
    assert (tuner.steady, tuner.fallbacks) == (2, 0)
