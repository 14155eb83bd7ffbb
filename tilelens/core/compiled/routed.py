"""A kernel as a compiled recording's router knows it (``tilelens.core.compiled.router``): per kernel, once.

Split from ``compiled.py``, which routes launches; this holds what each launch of one kernel reuses: the
parameters, the identity, the binding and capture plans, the launch-option getters and the kernel's last
templated launch.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from tilelens.core.compiled.capture import SnapPlan
from tilelens.core.compiled.templates import FlatPlan
from tilelens.core.kernel.arguments import Param
from tilelens.records import KernelIdentity

RESERVED = ("grid", "warmup")  # ``kernel[grid](...)``'s keyword arguments that are not the kernel's
RESERVED_SET = frozenset(RESERVED)


@dataclass(slots=True)
class RoutedKernel:
    """A kernel as a compiled recording's router knows it: its parameters and identity, and what binding,
    capturing and templating its launches need, computed once (``compiled.CompiledRouter._kernel``).

    Slots only: the compiled launcher (``native_capture.cpp``) reads ``jit``, ``last_template``,
    ``flat_plan`` and ``option_plans`` at their slots' offsets on every launch."""

    jit: Any
    params: list[Param]
    identity: KernelIdentity
    number: int = 0  # this recording's number for the kernel (the writer process learns it once)
    # What binding needs, computed once (``arguments.bind`` does the same per call).
    names: tuple[str, ...] = ()
    name_set: frozenset[str] = frozenset()
    defaults: tuple[Param, ...] = ()
    plan: Any = None  # ``capture.SnapPlan``
    flat_plan: Any = None  # ``compiled_templates.FlatPlan``
    not_options: frozenset[str] = frozenset()
    # The names of a call's keyword arguments -> (its launch options' names, a getter of their values).
    option_plans: dict[tuple[str, ...], tuple[tuple[str, ...], Any]] = field(default_factory=dict)
    # This kernel's last templated launch: (the Templates it numbered, its signature list, options key,
    # frames key, metadata id, node id, template number). A launch like the last one (the same layer of the
    # next step, a loop) takes its number by comparing, without building and hashing the whole key.
    last_template: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        self.names = tuple(p.name for p in self.params)
        self.name_set = frozenset(self.names)
        self.defaults = tuple(p for p in self.params if p.default is not inspect.Parameter.empty)
        self.plan = SnapPlan(self.params)
        self.flat_plan = FlatPlan(self.params)
        self.not_options = self.name_set | RESERVED_SET

    def options(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The launch options among ``kwargs`` (what ``bind`` returns second), when Triton did the binding."""
        skip = self.not_options
        return {key: value for key, value in kwargs.items() if key not in skip}

    def options_key(self, kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """What identifies the launch options among ``kwargs`` (``grid``/``warmup`` already taken out) in a
        template key: their names and values, without making the dict ``options`` makes on every launch."""
        names = tuple(kwargs)
        plan = self.option_plans.get(names)
        if plan is None:
            if len(self.option_plans) > 256:
                self.option_plans.clear()
            keep = tuple(name for name in names if name not in self.not_options)
            getter = itemgetter(*keep) if keep else (lambda kwargs: ())
            plan = self.option_plans[names] = (keep, getter)
        return (plan[0], plan[1](kwargs))

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``arguments.bind(self.params, args, kwargs)`` (``grid``/``warmup`` already taken out)."""
        bound = dict(zip(self.names, args))
        options: dict[str, Any] = {}
        if kwargs:
            names = self.name_set
            for key, value in kwargs.items():
                if key in names:
                    bound[key] = value
                elif key not in ("grid", "warmup"):
                    options[key] = value
        if len(bound) < len(self.names):
            for p in self.defaults:
                if p.name not in bound:
                    bound[p.name] = p.default
        return bound, options
