"""Reference interpositions that calibrate the compiled-recording ratio.

``snapshots="none"`` must cost little beside the untraced step. At a launch-bound step (the GPU waits on the
program's CPU, ~100 µs of Python, torch and Triton a launch on the H200) that leaves ~5 µs a launch for
everything a recorder does. To show how much of that any recorder of launches spends before recording
anything, the bench measures two stand-ins beside TileLens, in the same run and paired the same way:

* ``"wrapper"``: a Python function set as ``JITFunction.run``, ``Autotuner.run`` and ``Heuristics.run`` (the
  methods TileLens intercepts) that calls the original and does nothing else: the cost of being in the call
  path at all, in Python.
* ``"capture"``: the same, plus the least a launch record needs, in plain Python: each tensor argument's data
  pointer, shape, strides and dtype, every other argument as it is, the grid, and the autotuner's chosen
  config; kept in a bounded list, never sent or stored, no template, no check.

Invariant: :func:`installed` restores the three methods to the objects they were on entry, also when the
body raises; a wrapper passes every argument and the result (or the exception) through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.jit import JITFunction

KINDS = ("wrapper", "capture")
KEPT = 4096  # rows the capture reference keeps before it starts over (bounded memory, as a recorder's queue)


class CaptureSink:
    """What the ``"capture"`` reference took: ``rows`` (per JIT launch ``(jit, grid, values)``) and
    ``configs`` (per autotuner call its ``best_config``), each emptied when it reaches :data:`KEPT`."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, Any, list[Any]]] = []
        self.configs: list[Any] = []
        self.launches = 0  # JIT launches taken, over the whole installation


def _pass_through(original: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **kwargs)

    return run


def _capturing_jit(original: Callable[..., Any], sink: CaptureSink) -> Callable[..., Any]:
    tensor = torch.Tensor
    rows = sink.rows

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        values: list[Any] = []
        for v in args:
            values.append((v.data_ptr(), v.shape, v.stride(), v.dtype) if type(v) is tensor else v)
        rows.append((self, kwargs.get("grid"), values))
        if len(rows) >= KEPT:
            rows.clear()
        sink.launches += 1
        return result

    return run


def _capturing_tuner(original: Callable[..., Any], sink: CaptureSink) -> Callable[..., Any]:
    configs = sink.configs

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        configs.append(getattr(self, "best_config", None))
        if len(configs) >= KEPT:
            configs.clear()
        return result

    return run


@contextmanager
def installed(kind: str) -> Iterator[CaptureSink]:
    """Install the ``kind`` reference (one of :data:`KINDS`) for the block; yields the capture's sink (left
    empty by ``"wrapper"``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    sink = CaptureSink()
    saved = (JITFunction.run, Autotuner.run, Heuristics.run)
    jit_run, tuner_run, heuristics_run = saved
    if kind == "wrapper":
        new = (_pass_through(jit_run), _pass_through(tuner_run), _pass_through(heuristics_run))
    else:
        new = (
            _capturing_jit(jit_run, sink),
            _capturing_tuner(tuner_run, sink),
            _pass_through(heuristics_run),
        )
    try:
        JITFunction.run, Autotuner.run, Heuristics.run = new  # type: ignore[method-assign]
        yield sink
    finally:
        JITFunction.run, Autotuner.run, Heuristics.run = saved  # type: ignore[method-assign]
