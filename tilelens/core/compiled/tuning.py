"""What a compiled recording's router does for autotuners and heuristics layers: their frames on the
launching thread's stack, and each fresh tuning as an ``AutotuneEvent`` with Triton's own timings.

Split from ``compiled.py`` (``CompiledRouter`` takes these as a base class); the launches themselves are
routed there. An autotuner's call is intercepted (``tune``): its frame is pushed, Triton's ``Autotuner.run``
runs inside it, and a call that grew the autotuner's cache is a fresh tuning. Invariants: a frame is on the
stack only while its call runs; a launch is recorded with the frames of its own kernel's layers only
(``_frames_of``).
"""

from __future__ import annotations

import itertools
from operator import itemgetter
from typing import Any

from tilelens.core import compat
from tilelens.core.compiled.frames import Frame, Framed, RouterLocal, floats, frame_key, leaf
from tilelens.core.compiled.routed import RESERVED_SET, RoutedKernel
from tilelens.core.kernel.arguments import config_dict, kernel_params
from tilelens.core.kernel.identity import known_identity
from tilelens.core.patches import original_run
from tilelens.records import AutotuneEvent


class TunerPlan:
    """What every call of one autotuner needs, worked out at its first call: its key arguments' positions
    (and a getter of their values), whether the kernel has parameters named ``grid`` or ``warmup``, and the
    JITFunction under it (valid while the autotuner's ``fn`` is the same object)."""

    __slots__ = ("tuner", "positions", "values", "no_reserved", "highest", "fn", "leaf")

    def __init__(self, tuner: Any) -> None:
        self.tuner = tuner
        self.positions = compat.autotune_key_plan(tuner)
        positions = self.positions
        self.values: Any = itemgetter(*positions) if positions else (lambda args: ())
        self.no_reserved = RESERVED_SET.isdisjoint(tuner.arg_names)
        self.highest = max(positions, default=-1)
        self.fn = tuner.fn
        self.leaf = leaf(tuner)


class TuningFrames:
    """The router's frames and tuning events; ``CompiledRouter`` holds the state named below."""

    sink: Any
    _local: RouterLocal
    _kernels: dict[int, RoutedKernel]
    _numbers: itertools.count[int]
    _originals: dict[type, Any]
    _tuner_plans: dict[int, TunerPlan]
    _tuner_run: Any

    @staticmethod
    def _frames_of(stack: list[Frame], jit: Any) -> list[Frame]:
        """The frames on ``stack`` of ``jit``'s own layers. An intercepted autotuner call keeps its frame on the
        stack for the whole call, so a kernel launched by a config's ``pre_hook`` (or anything else the call
        runs before its own launch) would otherwise carry its tuning key and config."""
        if stack[-1].leaf is jit:
            return stack
        return [f for f in stack if f.leaf is jit]

    def heuristics(self, kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        frame = Frame(kernel, heuristics=tuple(kernel.values), leaf=leaf(kernel))
        frame_key(frame)
        run = self._original(compat.Heuristics)
        with self._framed(frame):
            return run(kernel, *args, **kwargs)

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
        plan = self._tuner_plans.get(id(tuner))
        if plan is None or plan.tuner is not tuner or plan.fn is not tuner.fn:
            plan = self._tuner_plans[id(tuner)] = TunerPlan(tuner)
        frame = Frame(tuner, None, (), 0, None, True, leaf=plan.leaf)
        cache = tuner.cache
        size = len(cache)
        timings_before = None
        if len(tuner.configs) > 1:
            self._key_later(frame, plan, args, kwargs)
            timings_before = getattr(tuner, "configs_timings", None)
        frame.tkey = (id(tuner), frame.key, frame.key_values)
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
        """After a tuned call that grew the tuner's cache (``tune``): a fresh
        tuning (or Triton's disk cache) added this call's key. (Another thread tuning the same autotuner at
        the same moment could make an already known key look fresh.)"""
        if self._full_key(frame) in cache:
            timings = getattr(tuner, "configs_timings", None)
            timed = timings is not None and timings is not timings_before  # else nothing was benchmarked
            self._tuning_event(tuner, frame, timed, timed and frame.trials == 0)

    def _key_later(
        self, frame: Frame, plan: TunerPlan, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        """Give a tuned call's frame its key (``compat.autotune_key``), or, for a call with positional
        arguments only, what stands for it until it is needed (``key_values``: the number of arguments and the
        key arguments' values): a launch of a template already made never needs the key itself (its dtype
        texts follow from the tensors' dtypes in the template key's signature)."""
        frame.tuned = True
        tuner = plan.tuner
        # ``kernel[grid](...)`` calls the tuner with ``grid``/``warmup`` only, which the key leaves out (it
        # keeps the names in ``arg_names``) unless the kernel has parameters of those names.
        if kwargs and (not plan.no_reserved or not kwargs.keys() <= RESERVED_SET):
            frame.key = compat.autotune_key(tuner, args, kwargs)
        elif len(args) > plan.highest:
            frame.args = args
            frame.positions = plan.positions
            frame.key_values = (len(args), plan.values(args))
        else:
            frame.key = compat.autotune_key_positional(plan.positions, tuner.arg_names, args)

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
