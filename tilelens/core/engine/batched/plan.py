"""What a batched attempt replaces in Triton's interpreter: the builder object's class, and (owner, name,
value) triples.

:func:`tilelens.core.patches.batched_patches` installs them (and puts everything back); this module only
builds them, over what is installed at the time (TileLens's access hooks and semantic fixes stay underneath).
"""

from __future__ import annotations

from typing import Any

from tilelens.core import compat
from tilelens.core.engine.batched import builder, executor, ops
from tilelens.core.engine.batched.state import BatchState, Fallback

Change = tuple[Any, str, Any]


def _refuse_static_print(*args: Any, **kwargs: Any) -> None:
    raise Fallback("static_print")  # the stock interpreter prints once per program


def replacements(state: BatchState, collector: Any) -> tuple[type, list[Change], list[Change]]:
    """(the builder object's class for the attempt; reductions and scans; the ``tl`` ones each helper's
    language patching resets).

    The class (``builder.batched_class``) is built once per state and calls the builder's methods as installed
    when they run; the rest is built per attempt (a handful of objects, over the collector of the launch).
    """
    cls = builder.batched_class(compat.InterpreterBuilder, state)
    changes: list[Change] = [
        (compat.ReduceOps, "apply", ops.reduce_apply(compat.ReduceOps.apply, state)),
        (compat.ScanOps, "apply", ops.scan_apply(compat.ScanOps.apply, state)),
    ]
    tensor = compat.tl.core.tensor
    decide = executor.periodic_check(state, collector)
    methods = ops.tensor_methods(tensor.__bool__, tensor.__index__, vars(tensor).get("T"), state, decide)
    lang: list[Change] = [(tensor, name, fn) for name, fn in methods.items()]
    lang += [(ns, "static_print", _refuse_static_print) for ns in (compat.tl, compat.tl.core)]
    return cls, changes, lang
