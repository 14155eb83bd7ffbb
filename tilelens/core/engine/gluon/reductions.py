"""Reductions and scans of Gluon tensors: the interpreter computes them, the results get Gluon's layouts.

Triton's interpreter computes ``tl.reduce``/``tl.associative_scan`` (and so ``gl.sum``, ``gl.max``, ...) with
numpy and returns plain ``block_type`` tensors. Gluon code goes on with the result (``gl.expand_dims(s, 1)``
checks for a ``SliceLayout``), so the results are given the layouts compiled Gluon gives them: a reduction
along ``axis`` of a tensor in layout ``L`` is in ``SliceLayout(axis, L)`` (``L`` again with ``keep_dims``), a
scan keeps ``L``. Installed for Gluon launches only, around the interpreter's ``apply`` methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tilelens.core.engine.gluon.semantic import distributed, layout_of
from tilelens.core.kernel import layouts


def _with_layout(results: Any, layout: Any) -> Any:
    if isinstance(results, tuple):
        return tuple(distributed(r, layout) for r in results)
    if isinstance(results, list):
        return [distributed(r, layout) for r in results]
    return distributed(results, layout)


def reduce_apply(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def apply(self: Any, input: Any) -> Any:
        results = original(self, input)
        first = input[0] if isinstance(input, tuple) else input
        layout = layout_of(first)
        if layout is None:
            return results
        if self.axis is not None and not self.keep_dims:
            layout = layouts.reduced(layout, int(self.axis))
        return _with_layout(results, layout)

    return apply


def scan_apply(original: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def apply(self: Any, input: Any) -> Any:
        results = original(self, input)
        first = input[0] if isinstance(input, tuple) else input
        layout = layout_of(first)
        return results if layout is None else _with_layout(results, layout)

    return apply
