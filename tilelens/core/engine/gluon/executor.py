"""Which parameters of a Gluon kernel are constexprs, as the interpreter's ``GridExecutor`` must know.

The interpreter recompiles a kernel's source under its own ``from __future__ import annotations``, so it sees
annotations as strings and recognises only ``"tl.constexpr"``: a Gluon kernel's ``BLOCK: gl.constexpr`` would
be passed as a tensor. For Gluon launches the executor takes every annotation naming ``constexpr`` (``gl.``,
``ttgl.``, ``tl.`` or bare), the rule ``tilelens.core.kernel.arguments.kernel_params`` follows too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tilelens.core import compat


def is_constexpr_annotation(annotation: Any) -> bool:
    if annotation is compat.tl.constexpr:
        return True
    return isinstance(annotation, str) and annotation.strip().split(".")[-1] == "constexpr"


def grid_executor_init(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, fn: Any, arg_names: Any, grid: Any, *rest: Any, **kwargs: Any) -> None:
        original(self, fn, arg_names, grid, *rest, **kwargs)
        annotations = inspect.get_annotations(fn)
        self.constexprs = [name for name in arg_names if is_constexpr_annotation(annotations.get(name))]

    return __init__
