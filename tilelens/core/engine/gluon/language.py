"""What Gluon's language modules must look like while a simulated launch runs.

Triton's interpreter makes ``tl`` builtins callable from kernel code by replacing them, for the launch, with
functions that pass its semantic. Gluon's builtins need the same, with the simulator's semantic: this module
lists, for every loaded ``triton.experimental.gluon.language`` module and every class defined there, the
attributes to replace and their replacements. The replacements read the semantic of the launch in progress
from ``ACTIVE``, so they are built once per process; ``interpreter.gluon_simulation`` installs them (and sets
``ACTIVE``) for one launch and restores everything afterwards.

Besides builtins: ``gl.reduce``/``gl.associative_scan`` run Triton's interpreter reductions (with Gluon
layouts, see ``reductions.py``), ``gl.static_range`` is ``range``, and ``static_assert``/``static_print``/
``multiple_of`` and friends behave as the interpreter makes their ``tl`` twins behave.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tilelens.core import compat

PREFIX = "triton.experimental.gluon.language"


@dataclass
class _Active:
    semantic: Any = None


ACTIVE = _Active()


def _semantic() -> Any:
    semantic = ACTIVE.semantic
    if semantic is None:
        raise RuntimeError("a Gluon builtin was called outside a simulated Gluon launch")
    return semantic


def _with_semantic(member: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs["_semantic"] = _semantic()
        return member(*args, **kwargs)

    call.__name__ = getattr(member, "__name__", "gluon_builtin")
    call.__qualname__ = getattr(member, "__qualname__", call.__name__)
    call._tilelens_gluon = member  # type: ignore[attr-defined]
    return call


def _range(arg1: Any, arg2: Any = None, step: Any = None, **_: Any) -> range:
    unwrap = compat.tl.core._unwrap_if_constexpr
    start, end = (0, arg1) if arg2 is None else (arg1, arg2)
    return range(int(unwrap(start)), int(unwrap(end)), 1 if step is None else int(unwrap(step)))


def _static_assert(cond: Any, msg: Any = "", **_: Any) -> None:
    assert compat.tl.core._unwrap_if_constexpr(cond), compat.tl.core._unwrap_if_constexpr(msg)


def _static_print(*args: Any, **_: Any) -> None:
    print(*args)


def _hint(input: Any, values: Any = None, **_: Any) -> Any:
    return input  # compiler hints only


def _reduce(input: Any, axis: Any, combine_fn: Any, keep_dims: Any = False, **_: Any) -> Any:
    unwrap = compat.tl.core._unwrap_if_constexpr
    return compat.ReduceOps(unwrap(axis), combine_fn, unwrap(keep_dims)).apply(input)


def _scan(input: Any, axis: Any, combine_fn: Any, reverse: Any = False, **_: Any) -> Any:
    unwrap = compat.tl.core._unwrap_if_constexpr
    return compat.ScanOps(unwrap(axis), combine_fn, unwrap(reverse)).apply(input)


_BY_NAME: dict[str, Callable[..., Any]] = {
    "reduce": _reduce,
    "associative_scan": _scan,
    "static_assert": _static_assert,
    "static_print": _static_print,
    "multiple_of": _hint,
    "max_contiguous": _hint,
    "max_constancy": _hint,
}


def is_gluon_builtin(value: Any) -> bool:
    """A builtin defined by (or wrapped in) Gluon's language package."""
    if not compat.is_builtin(value):
        return False
    code = getattr(value, "__code__", None)
    return code is not None and PREFIX.replace(".", "/") in code.co_filename.replace("\\", "/")


def _replacement(name: str, value: Any) -> Callable[..., Any] | type | None:
    if value is compat.tl.core.static_range:
        return _range
    if not compat.is_builtin(value):
        return None
    special = _BY_NAME.get(name)
    if special is not None:
        return special
    # Some compile-time helpers carry the builtin mark without taking a semantic (_compute_tmem_reg_layout).
    return _with_semantic(value) if _takes_semantic(value) else None


def _takes_semantic(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    return "_semantic" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _needs_semantic(name: str, value: Any) -> bool:
    if compat.is_builtin(value):
        return True
    if name.startswith("_") or not inspect.isfunction(value):
        return False
    try:
        return "_semantic" in inspect.signature(value).parameters
    except (TypeError, ValueError):
        return False


_cache: dict[frozenset[str], list[tuple[Any, str, Any]]] = {}


def replacements() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) for every loaded Gluon language module and class.

    Cached per set of loaded modules.
    """
    names = frozenset(n for n in sys.modules if n.startswith(PREFIX))
    found = _cache.get(names)
    if found is None:
        found = _cache[names] = list(_discover(names))
    return found


def _discover(names: frozenset[str]) -> Iterator[tuple[Any, str, Any]]:
    seen_classes: set[int] = set()
    for module_name in sorted(names):
        module = sys.modules.get(module_name)
        if not isinstance(module, types.ModuleType):
            continue
        for name, value in list(vars(module).items()):
            replacement = _replacement(name, value)
            if replacement is not None:
                yield module, name, replacement
            elif (
                inspect.isclass(value)
                and value.__module__.startswith(PREFIX)
                and id(value) not in seen_classes
            ):
                seen_classes.add(id(value))
                for attr, member in list(vars(value).items()):
                    if _needs_semantic(attr, member):
                        yield value, attr, _with_semantic(member)


def patch_attr(module: Any) -> Callable[..., None]:
    """The interpreter's ``_patch_attr``, passing ``module.interpreter_semantic`` as read at each call.

    Triton 3.6 binds a semantic of its own when it patches (``compat.INTERPRETER_SEMANTIC_IS_GLOBAL``).
    """

    def _patch_attr(obj: Any, name: str, member: Any, builder: Any, scope: Any) -> None:
        def new_member(*args: Any, **kwargs: Any) -> Any:
            kwargs["_semantic"] = module.interpreter_semantic
            return member(*args, **kwargs)

        scope.set_attr(obj, name, new_member)

    return _patch_attr


def global_replacements(fn_globals: dict[str, Any], names: set[str]) -> Iterator[tuple[str, Any]]:
    """(name, replacement) for Gluon builtins a function imported by name.

    (``from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared``)
    """
    for name in names:
        value = fn_globals.get(name)
        if value is not None and getattr(value, "_tilelens_gluon", None) is None and is_gluon_builtin(value):
            replacement = _replacement(name, value)
            if replacement is not None:
                yield name, replacement
