"""A kernel's bundle: what reproduces it without its file, kept as data with every launch.

A launch can be reproduced when the kernel's file is gone or changed only if the history holds what the
kernel ran with. The bundle is that, read off the live objects at record time: the source of the kernel and
of every ``@triton.jit`` function it calls, transitively, and for each of them the module-level names its code
reads, as plain values (ints, floats, bools, strings, None, ``tl.constexpr`` of those, Triton dtypes), as
modules to import (``tl`` -> ``triton.language``), or as another function of the bundle. Anything else (an
arbitrary object) is listed as ``unsupported``: the bundle cannot rebuild it.

Format (canonical JSON text, so equal bundles are equal bytes and hash alike)::

    {"version": 1, "entry": "<module>:<qualname>", "unsupported": ["<module>:<name>: <type>", ...],
     "units": [{"key": "<module>:<qualname>", "name": ..., "module": ..., "file": ..., "line": ...,
                "decorator": "triton.jit" | "gluon.jit", "source": "def ...",
                "imports": {name: module}, "values": {name: {"kind": ..., "value": ...}},
                "functions": {name: key}}, ...]}

Units come dependencies first; each runs in a namespace of its own (two modules may use one name for
different values). Nothing here runs stored code: ``tilelens.replay`` runs a bundle only under
``--from-history --trust-source``, and ``tilelens repro`` writes it beside a script the user runs.
Invariant: a function's source is what Triton compiles (``JITFunction.src``, cut at ``def``).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import linecache
import types
import weakref
from typing import Any

from tilelens.core import compat

VERSION = 1
_PLAIN = (int, float, bool, str, type(None))

# JITFunction -> its bundle's JSON text, for the life of the kernel object (one bundle per kernel a recording).
_KNOWN: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def kernel_bundle(jit: Any) -> str | None:
    """The bundle of ``jit`` (a ``JITFunction``) as canonical JSON text; None when it has no source."""
    # A JITFunction hashes by its cache key, which raises for a kernel whose globals Triton cannot hash (an
    # InterpretedFunction callee): such a kernel's bundle is made again at each call rather than kept.
    try:
        known = _KNOWN.get(jit, False)
    except Exception:
        known = False
    if known is not False:
        return known  # type: ignore[return-value]
    text = _make(jit)
    with contextlib.suppress(Exception):  # not weakly referable or not hashable: made again next time
        _KNOWN[jit] = text
    return text


def _make(jit: Any) -> str | None:
    units: list[dict[str, Any]] = []
    unsupported: list[str] = []
    keys: dict[int, str] = {}
    if not _unit(jit, units, unsupported, keys, set()):
        return None
    bundle = {
        "version": VERSION,
        "entry": keys[id(jit)],
        "unsupported": sorted(set(unsupported)),
        "units": units,
    }
    return json.dumps(bundle, sort_keys=True, separators=(",", ":"))


def _unit(
    jit: Any, units: list[dict[str, Any]], unsupported: list[str], keys: dict[int, str], visiting: set[int]
) -> bool:
    """Append ``jit``'s unit after its callees'; False when it has no source (nothing to reproduce)."""
    if id(jit) in keys:
        return True
    source = compat.jit_source(jit)
    fn = getattr(jit, "fn", None)
    if not source or fn is None:
        return False
    visiting.add(id(jit))
    module, qualname = fn.__module__, fn.__qualname__
    key = f"{module}:{qualname}"
    imports: dict[str, str] = {}
    values: dict[str, dict[str, Any]] = {}
    functions: dict[str, str] = {}
    scope = fn.__globals__
    for name in sorted(_names_read(fn.__code__)):
        if name not in scope:
            continue  # a builtin, or a name no statement of the module bound
        value = scope[name]
        if isinstance(value, types.ModuleType):
            imports[name] = value.__name__
        elif isinstance(
            value, (compat.JITFunction, compat.InterpretedFunction)
        ):  # TRITON_INTERPRET=1: the latter
            if id(value) in visiting:
                unsupported.append(f"{key}: {name}: a recursive call")
            elif _unit(value, units, unsupported, keys, visiting):
                functions[name] = keys[id(value)]
            else:
                unsupported.append(f"{key}: {name}: a JIT function without source")
        else:
            described = describe_value(value)
            if described is None:
                unsupported.append(f"{key}: {name}: {type(value).__module__}.{type(value).__qualname__}")
            else:
                values[name] = described
    visiting.discard(id(jit))
    code = fn.__code__
    units.append(
        {
            "key": key,
            "name": fn.__name__,
            "module": module,
            "file": code.co_filename,
            "line": def_line_of(fn),
            "decorator": "gluon.jit" if compat.is_gluon(jit) else "triton.jit",
            "source": source,
            "imports": imports,
            "values": values,
            "functions": functions,
        }
    )
    keys[id(jit)] = key
    return True


def _names_read(code: types.CodeType) -> set[str]:
    """Every name a code object (and the ones nested in it) may read from its globals (attribute names too:
    only those the function's globals hold count)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_read(const)
    return names


def describe_value(value: Any) -> dict[str, Any] | None:
    """A global's value as plain data, or None when it is not one a bundle can hold."""
    if type(value) in _PLAIN and not (type(value) is int and abs(value) >= 1 << 63):
        return {"kind": type(value).__name__, "value": value if type(value) is not float else repr(value)}
    if isinstance(value, compat.tl.constexpr):
        inner = describe_value(value.value)
        return None if inner is None else {"kind": "constexpr", "value": inner}
    if isinstance(value, compat.tl.dtype):
        return {"kind": "dtype", "value": str(value.name)}
    return None


def def_line_of(pyfn: Any) -> int:
    """Line of the ``def`` itself (decorators excluded), as Triton 3.8 reports it; 3.6 does not.

    The first line from ``co_firstlineno`` (the first decorator's) that starts a ``def``, read through
    ``linecache`` as ``inspect`` reads it, remembered per code object: ``inspect.getsourcelines`` tokenizes the
    whole function to find its end, 1-5 ms for a Liger kernel, paid by the first launch of each kernel in every
    recording. Source that ``linecache`` does not hold goes to ``inspect`` as before."""
    code = pyfn.__code__
    known = _DEF_LINES.get(code)
    if known is not None:
        return known
    start = code.co_firstlineno
    linecache.checkcache(code.co_filename)  # as inspect does: a file changed on disk is read again
    lines = linecache.getlines(code.co_filename, pyfn.__globals__)
    line = next(
        (start + i for i, text in enumerate(lines[start - 1 :]) if text.lstrip().startswith("def ")), None
    )
    if line is None:
        found, start = inspect.getsourcelines(pyfn)
        line = next((start + i for i, text in enumerate(found) if text.strip().startswith("def ")), start)
    if len(_DEF_LINES) > 4096:
        _DEF_LINES.clear()
    _DEF_LINES[code] = line
    return line


# code object -> its def line (the dict keeps the code objects alive: bounded)
_DEF_LINES: dict[Any, int] = {}
