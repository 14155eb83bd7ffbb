"""What a compiled recording's router keeps per call on the launching thread: the frames of autotuner and
heuristics calls (which launch they made, its tuning key), and the probe that reads the arguments Triton bound.

Split from ``compiled.py``, which routes; these are its per-call values. Invariant: a frame lives only while
its call runs (on ``RouterLocal.stack``), so what it holds (the call's arguments) is never kept longer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from tilelens.core import compat


class RouterLocal(threading.local):
    """A router's per-thread state; ``stack`` (this thread's frames) is made by the thread's first launch."""

    stack: list[Frame] | None = None


@dataclass(slots=True)
class Frame:
    layer: Any
    key: tuple[Any, ...] | None = None
    heuristics: tuple[str, ...] = ()
    trials: int = 0
    launch: Any = None  # the handle of the launch this tuning made
    tuner: bool = False  # ``layer`` is an Autotuner
    key_text: str | None = None  # ``str(key)``, made by the first launch that needs it
    tuned: bool = False  # an Autotuner with more than one config: its launches have a tuning key
    # A call with positional arguments only: its key is worked out when first needed (``_full_key``) from
    # ``args``; until then its key values (:func:`key_values`: the number of arguments, the key arguments'
    # values) stand for it, made from ``args`` and the key arguments' ``positions``.
    args: tuple[Any, ...] | None = None
    key_values: tuple[Any, ...] | None = None
    positions: tuple[int, ...] | None = None
    leaf: Any = None  # the JITFunction under ``layer`` (``leaf``), set when the frame is made
    tkey: tuple[Any, ...] | None = None  # ``frame_key``, set when the frame is made (it never changes after)


class GridProbe:
    """The grid handed to Triton's ``JITFunction.run`` in place of the program's, when the runner is Triton's.

    Triton calls a callable grid once per launch with the arguments it has just bound (every parameter, defaults
    applied; 3.6 through 3.9: ``grid = grid(bound_args)``), after its kernel-cache lookup and before the launch.
    The probe keeps that dict, so the router reads the arguments Triton bound instead of binding them a second
    time, and returns exactly what the program's grid gives (a tuple grid: itself) so Triton launches what it
    would. ``bound`` stays None when Triton failed before the grid (binding, compiling): the router binds then."""

    __slots__ = ("grid", "bound", "value")

    def __init__(self, grid: Any) -> None:
        self.grid = grid
        self.bound: dict[str, Any] | None = None
        self.value: Any = None

    def __call__(self, bound: dict[str, Any]) -> Any:
        self.bound = bound
        grid = self.grid
        value = self.value = grid(bound) if callable(grid) else grid
        return value


class Framed:
    """``with``: ``frame`` is on the launching thread's stack for the duration (one object per call, no class
    made per call: this runs for every autotuned launch)."""

    __slots__ = ("stack", "frame")

    def __init__(self, stack: list[Frame], frame: Frame) -> None:
        self.stack, self.frame = stack, frame

    def __enter__(self) -> Frame:
        self.stack.append(self.frame)
        return self.frame

    def __exit__(self, *exc: object) -> None:
        self.stack.pop()


def frame_key(f: Frame) -> tuple[Any, ...]:
    """A frame's part of a template key (``CompiledRouter._templated``): the layer, and an autotuner's tuning
    key or a heuristics layer's names. Not the autotuner's ``best_config``: every thread's call of it sets that
    attribute, so another thread's call may have changed it by the time this launch is checked. The config a
    launch used is told apart without it: its meta-parameters are the launch's constexprs (in the template's
    signature) and its ``num_warps``/``num_stages``/``num_ctas``/``maxnreg`` the launch's options (in its
    options key), which is all ``config_dict`` stores of it. Made once, when the frame is made (``tkey``)."""
    if f.tkey is None:
        f.tkey = (id(f.layer), f.key, f.key_values) if f.tuner else (id(f.layer), f.heuristics)
    return f.tkey


def leaf(layer: Any) -> Any:
    """The ``JITFunction`` under an autotuner's or heuristics' chain of layers."""
    node = layer
    while isinstance(node, (compat.Autotuner, compat.Heuristics)):
        node = node.fn
    return node


def floats(timing: Any) -> list[float]:
    """One config's timing from Triton's benchmark (a number, or one per quantile) as a list of floats."""
    if isinstance(timing, (list, tuple)):
        return [float(t) for t in timing]
    return [float(timing)]
