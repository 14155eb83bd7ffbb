"""What a compiled recording's router does for autotuners and heuristics layers (issue 15): their frames on
the launching thread's stack, and each fresh tuning as an ``AutotuneEvent`` with Triton's own timings.

Split from ``compiled.py`` (``CompiledRouter`` takes these as a base class); the launches themselves are
routed there. Two ways to frame an autotuner's call: intercept it (``tune``, or the compiled module's ``Tuner``,
with Triton's ``Autotuner.run`` called inside), or, where the compiled module reads Python frames
(``caller_tuner``), leave ``Autotuner.run`` as it is and frame the launch it makes from that call's own
locals (``native_calls.cpp``, ``caller_framed_launch``; ``heuristics`` below for a heuristics layer under
it), with its tuning told afterwards (``_after_caller_tuner``). A call that did not tune hands its frame to
the compiled launcher unmade; Python never sees such a frame until the launcher, leaving its steady path,
has it made and put on the stack (``native_common.h``, ``CallerFrame``). Both ways store the same rows
(``tests/unit/test_caller_frames.py``, ``tests/unit/test_native_calls.py``). Invariants: a frame is on the
stack only while its call runs (an unmade caller frame: from when it is made to the call's end); a launch is
recorded with the frames of its own kernel's layers only (``_frames_of``).
"""

from __future__ import annotations

import itertools
import sys
from typing import Any

from tilelens.core import compat
from tilelens.core.arguments import kernel_params
from tilelens.core.compiled_frames import Frame, Framed, RouterLocal, floats, leaf
from tilelens.core.compiled_kernel import RESERVED_SET, RoutedKernel
from tilelens.core.identity import known_identity
from tilelens.core.interpreter import original_run
from tilelens.core.launch import config_dict
from tilelens.records import AutotuneEvent


class TuningFrames:
    """The router's frames and tuning events; ``CompiledRouter`` holds the state named below."""

    sink: Any
    _local: RouterLocal
    _kernels: dict[int, RoutedKernel]
    _numbers: itertools.count[int]
    _originals: dict[type, Any]
    _tuner_plans: dict[int, tuple[Any, tuple[int, ...], bool, int]]
    _tuner_run: Any
    _tuner: Any
    _tuner_callers: bool  # ``_tuner`` was configured to frame launches from their autotuner's Python frame

    def caller_tuner(self) -> Any:
        """The compiled ``Tuner`` when it frames the launches Triton's ``Autotuner.run`` makes from that call's
        own Python frame (``compiled_native.CALLER_FRAMES``), so that autotuner calls need no interception;
        else None. ``direct_routes`` makes it."""
        return self._tuner if self._tuner_callers else None

    @staticmethod
    def _frames_of(stack: list[Frame], jit: Any) -> list[Frame]:
        """The frames on ``stack`` of ``jit``'s own layers. An intercepted autotuner call keeps its frame on the
        stack for the whole call, so a kernel launched by a config's ``pre_hook`` (or anything else the call
        runs before its own launch) would otherwise carry its tuning key and config. A launch whose frames
        are filtered so gets no template the compiled launcher could match with the whole stack: each one
        comes back here."""
        if leaf(stack[-1].layer) is jit:
            return stack
        return [f for f in stack if leaf(f.layer) is jit]

    def bench_framed(self, tuner: Any) -> Framed:
        """The autotuner's frame while it benchmarks one config, when its calls are not intercepted: the
        trial launches find it there, are not recorded, and are counted on it (as inside ``tune``)."""
        return self._framed(Frame(tuner, None, (), 0, None, True, tuned=True))

    def heuristics(self, kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        frame = Frame(kernel, heuristics=tuple(kernel.values))
        run = self._original(compat.Heuristics)
        caller = sys._getframe(1) if self.caller_tuner() is not None else None
        outer = None if caller is None else self._caller_frame(caller)
        if outer is None:
            with self._framed(frame):
                return run(kernel, *args, **kwargs)
        stack = self._stack()
        stack.append(outer)  # below this layer's, as the compiled tuner puts it for a launch
        try:
            with self._framed(frame):
                return run(kernel, *args, **kwargs)
        finally:
            stack.pop()
            self._after_caller_tuner(outer.layer, outer, caller)

    @staticmethod
    def _caller_frame(caller: Any) -> Frame | None:
        """The frame of the autotuner whose Triton ``run`` is the Python frame ``caller`` (this heuristics
        layer's caller), made from its locals as ``native_calls.cpp``'s ``caller_framed_launch`` makes it for a
        launch; None when ``caller`` is other code."""
        if caller.f_code is not compat.AUTOTUNER_RUN_CODE:
            return None
        found = caller.f_locals
        tuner = found.get("self")
        if tuner is None:  # never seen: Triton's own frame
            return None
        key = found.get("key")  # bound only for an autotuner of more than one config
        return Frame(tuner, key, (), 0, None, True, tuned=key is not None)

    def _original(self, cls: type) -> Any:
        run = self._originals.get(cls)
        if run is None:
            run = self._originals[cls] = original_run(cls)
        return run

    # -- frames ----------------------------------------------------------------------------------------

    def _stack(self) -> list[Frame]:
        stack = self._local.stack
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _framed(self, frame: Frame) -> Framed:
        return Framed(self._stack(), frame)

    def tune(self, tuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        frame = Frame(tuner, None, (), 0, None, True)
        cache = tuner.cache
        size = len(cache)
        timings_before = None
        if len(tuner.configs) > 1:
            self._key_later(frame, tuner, args, kwargs)
            timings_before = getattr(tuner, "configs_timings", None)
        stack = self._local.stack
        if stack is None:
            stack = self._local.stack = []
        run = self._tuner_run
        if run is None:
            run = self._tuner_run = self._original(compat.Autotuner)
        stack.append(frame)  # on this thread's stack while the tuner runs (runs for every autotuned launch)
        try:
            return run(tuner, *args, **kwargs)
        finally:
            stack.pop()
            if frame.tuned and len(cache) != size:
                self._tuned(tuner, frame, timings_before, cache)

    def _tuned(self, tuner: Any, frame: Frame, timings_before: Any, cache: dict[Any, Any]) -> None:
        """After a tuned call that grew the tuner's cache (``tune``, or the compiled module's ``Tuner``): a fresh
        tuning (or Triton's disk cache) added this call's key. (Another thread tuning the same autotuner at
        the same moment could make an already known key look fresh.)"""
        if self._full_key(frame) in cache:
            timings = getattr(tuner, "configs_timings", None)
            timed = timings is not None and timings is not timings_before  # else nothing was benchmarked
            self._tuning_event(tuner, frame, timed, timed and frame.trials == 0)

    def _after_caller_tuner(self, tuner: Any, frame: Frame, caller: Any) -> None:
        """After a launch framed from its autotuner's Python frame ``caller`` (``caller_tuner``) by a call that
        may have tuned (``pruned_configs`` bound there, or the autotuner's cache changed size since its last
        such launch): when this very call did not find its key in the cache, its tuning's event
        (``compat.autotune_call_tuning``: benchmarked or read from Triton's disk cache, or one pruned config
        taken as it is)."""
        tuning = compat.autotune_call_tuning(caller)
        if tuning is not None and frame.tuned and frame.key in tuner.cache:
            self._tuning_event(tuner, frame, *tuning)

    def _key_later(self, frame: Frame, tuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Give a tuned call's frame its key (``compat.autotune_key``), or, for a call with positional
        arguments only, what stands for it until it is needed: a launch of a template already made never
        needs it (the key's dtype texts follow from the tensors' dtypes in the template key's signature)."""
        frame.tuned = True
        plan = self._tuner_plans.get(id(tuner))
        if plan is None or plan[0] is not tuner:
            positions = compat.autotune_key_plan(tuner)
            plan = self._tuner_plans[id(tuner)] = (
                tuner,
                positions,
                RESERVED_SET.isdisjoint(tuner.arg_names),
                max(positions, default=-1),
            )
        # ``kernel[grid](...)`` calls the tuner with ``grid``/``warmup`` only, which the key leaves out (it
        # keeps the names in ``arg_names``) unless the kernel has parameters of those names.
        if kwargs and (not plan[2] or not kwargs.keys() <= RESERVED_SET):
            frame.key = compat.autotune_key(tuner, args, kwargs)
        elif len(args) > plan[3]:
            frame.args = args
            frame.positions = plan[1]  # the key values are made when needed (``compiled_frames.key_values``)
        else:
            frame.key = compat.autotune_key_positional(plan[1], tuner.arg_names, args)

    def _full_key(self, frame: Frame) -> tuple[Any, ...]:
        """A tuned frame's key, worked out now if it was left for later (``_key_later``)."""
        if frame.key is None:
            tuner = frame.layer
            positions = compat.autotune_key_plan(tuner)
            frame.key = compat.autotune_key_positional(positions, tuner.arg_names, frame.args or ())
        return frame.key

    def _tuning_event(self, tuner: Any, frame: Frame, timed: bool, from_disk: bool) -> None:
        """The event of the tuning of ``frame``'s key: with the autotuner's ``configs_timings`` when ``timed``
        (benchmarked now, or read from Triton's disk cache: ``from_disk``), else its one config."""
        chosen = tuner.cache[frame.key]
        timings = getattr(tuner, "configs_timings", None) if timed else None
        times: list[list[float] | None] | None
        if timings is None:
            configs, times = [chosen], None  # pruning left one config: nothing was benchmarked
        else:
            configs = list(timings)
            times = [floats(timings[c]) for c in configs]
        event = AutotuneEvent(
            kernel=self._kernel(leaf(tuner)).identity,
            tuning_key=str(frame.key),
            configs=[config_dict(c) for c in configs],
            chosen=config_dict(chosen),
            timings=times,
            cache_hit=times is not None and from_disk,  # Triton's disk cache answered
        )
        self.sink.submit_event(event, frame.launch)

    def _kernel(self, jit: Any) -> RoutedKernel:
        known = self._kernels.get(id(jit))
        if known is None or known.jit is not jit:
            known = self._kernels[id(jit)] = RoutedKernel(
                jit, kernel_params(jit.fn), known_identity(jit), next(self._numbers)
            )
        return known
