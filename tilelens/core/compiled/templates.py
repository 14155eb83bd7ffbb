"""Templated raw launches: what repeats between a kernel's launches is sent to the writer once.

A launch-bound program launches the same kernel with the same kinds of arguments thousands of times. For a
``snapshots="none"`` recording written by the writer process, the program's thread keeps, per launch, only
what varies, as a flat tuple (:data:`Flat`), and the rest is a *template* made on the first launch of its kind:

* the template key (:meth:`Templates.key`): the kernel, every runtime argument's kind (a tensor's dtype, shape,
  strides and device; a scalar's type; None), every constexpr's type and value, the launch's keyword
  arguments, what the autotune/heuristics frames say (the layers, the tuning key; the chosen config's values
  are the launch's constexprs and options), the compiled kernel's metadata (by the cached dict's identity,
  which the template keeps alive) and the pytest node id. A change in any of them is a miss: a new template.
* the flat values: per tensor (in the kernel's parameter order) its storage offset, storage pointer and
  storage bytes; per scalar its value. With the start time, duration and resolved grid.
* the template body (:func:`body_of`): the snapped argument list with those values blanked, where they go
  (``slots``), and the launch options, context, metadata, GPU name and node id, all plain values.

Invariant: ``expand(body_of(raw, slots), started, duration, grid, values)`` is the
:data:`~tilelens.core.compiled.rows.RawLaunch` the untemplated path builds for the same launch, element by
element (``tests/unit/test_compiled_templates.py``). Anything else (a tensor subclass, a wrapper, an object
as a constexpr, an unhashable keyword value, a failed launch, a binding Triton did not do) takes the
untemplated path. Templates are bounded (:data:`LIMIT`): past it, new kinds of launches take that path too.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import torch

from tilelens.core.kernel.arguments import Param

_Tensor = torch.Tensor
_SCALARS = (int, float, bool)
_CONSTEXPRS = frozenset((int, float, bool, str, type(None)))
LIMIT = 4096  # templates per recording

# (template number, started (epoch seconds), duration (s), resolved grid, per-launch values).
Flat = tuple[Any, ...]


class FlatPlan:
    """What :func:`capture` (and the compiled one, ``tilelens.core.native``) needs of a kernel's parameters,
    computed once per kernel: the runtime and constexpr parameters' names, in order, and getters of them;
    and ``order``, every parameter's name in order with a byte per parameter (1: a constexpr), with which the
    compiled capture reads a dict Triton bound in that order in one walk."""

    __slots__ = ("runtime", "constexprs", "runtime_names", "constexpr_names", "order")

    def __init__(self, params: list[Param]) -> None:
        self.runtime_names = tuple(p.name for p in params if not p.constexpr)
        self.constexpr_names = tuple(p.name for p in params if p.constexpr)
        self.order = (tuple(p.name for p in params), bytes(1 if p.constexpr else 0 for p in params))
        self.runtime = _getter(list(self.runtime_names))
        self.constexprs = _getter(list(self.constexpr_names))


def _getter(names: list[str]) -> Any:
    """``bound -> tuple of bound[name] for name in names`` (KeyError when one is missing)."""
    if not names:
        return lambda bound: ()
    if len(names) == 1:
        name = names[0]
        return lambda bound: (bound[name],)
    return itemgetter(*names)


def capture(plan: FlatPlan, bound: dict[str, Any], last: Any = None) -> tuple[list[Any], list[Any]] | None:
    """``(signature, values)`` of a launch's bound arguments, or None when one is not a plain kind.

    The signature is flat: a tensor adds its dtype, shape, strides and device (a ``torch.dtype`` first, which
    no other entry is), a scalar its type, None itself, a constexpr its type and value; so two signatures are
    equal only when every argument is of the same kind, in order. (``last``, the signature of the kernel's
    last template, is for the compiled capture, which returns it when equal; here it is not needed.)"""
    sig: list[Any] = []
    values: list[Any] = []
    try:
        runtime = plan.runtime(bound)
        constexprs = plan.constexprs(bound)
    except KeyError:
        return None
    for v in runtime:
        cls = type(v)
        if cls is _Tensor:
            s = v.untyped_storage()
            sig += (v.dtype, v.shape, v.stride(), v.device)
            values += (v.storage_offset(), s.data_ptr(), s.nbytes())
        elif cls in _SCALARS:
            sig.append(cls)
            values.append(v)
        elif v is None:
            sig.append(None)
        else:
            return None
    for v in constexprs:
        cls = type(v)
        if cls not in _CONSTEXPRS:
            return None
        sig += (cls, v)
    return sig, values


def slots_of(params: list[Param], bound: dict[str, Any]) -> tuple[tuple[int, bool], ...]:
    """Where a launch's flat values go in its snapped list: (parameter index, is a tensor), in value order."""
    out = []
    for i, p in enumerate(params):
        if p.constexpr:
            continue
        v = bound.get(p.name)
        if type(v) is _Tensor:
            out.append((i, True))
        elif type(v) in _SCALARS:
            out.append((i, False))
    return tuple(out)


def body_of(raw: tuple[Any, ...], slots: tuple[tuple[int, bool], ...]) -> tuple[Any, ...]:
    """A template's body from the raw launch of its first launch: plain values only (it is marshalled)."""
    snapped, _grid, error, options, context, metadata, _started, _duration, gpu_name, nodeid = raw
    assert error is None
    blank = list(snapped)
    for i, tensor in slots:
        if tensor:
            d = blank[i]
            blank[i] = (d[0], d[1], d[2], None, None, None, d[6])
        else:
            blank[i] = None
    return (blank, tuple(slots), options, context, metadata, gpu_name, nodeid)


def expand(
    body: tuple[Any, ...], started: float, duration: float, grid: tuple[int, int, int], values: Any
) -> tuple[Any, ...]:
    """The :data:`~tilelens.core.compiled.rows.RawLaunch` of a templated launch."""
    blank, slots, options, context, metadata, gpu_name, nodeid = body
    snapped = list(blank)
    j = 0
    for i, tensor in slots:
        if tensor:
            d = snapped[i]
            snapped[i] = (d[0], d[1], d[2], values[j], values[j + 1], values[j + 2], d[6])
            j += 3
        else:
            snapped[i] = values[j]
            j += 1
    return (snapped, grid, None, options, context, metadata, started, duration, gpu_name, nodeid)


class Templates:
    """A recording's templates on the program's side: key -> template number (numbers start at 1).

    ``keep`` holds each template's body and the objects its key names by identity (metadata dict, autotuner
    and heuristics layers): while a key exists, no other object can take those identities."""

    __slots__ = ("numbers", "keep")

    def __init__(self) -> None:
        self.numbers: dict[Any, int] = {}
        self.keep: list[tuple[tuple[Any, ...], Any]] = []  # (body, objects the key names by identity)

    def add(self, key: Any, body: tuple[Any, ...], alive: Any = None) -> int | None:
        """The new template's number, or None past :data:`LIMIT`; ``alive``: the objects ``key`` names by
        identity, kept as long as the key."""
        if len(self.keep) >= LIMIT:
            return None
        self.keep.append((body, alive))
        number = self.numbers[key] = len(self.keep)
        return number
