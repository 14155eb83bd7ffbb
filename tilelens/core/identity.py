"""Kernel identity: who a kernel is, stable across processes and machines.

Must be computed outside any interpreted launch: ``JITFunction.cache_key`` walks the kernel's dependencies,
and doing that while the interpreter has patched ``tl`` fails and leaves a permanent ``recursion:`` placeholder
in callees' keys (a poisoned cache key that would also break later compiled launches).
"""

from __future__ import annotations

import hashlib
import inspect
import linecache
import os
import weakref
from typing import Any, cast

from tilelens.core import compat
from tilelens.core.interpreter import shadow_jit
from tilelens.core.launch_context import current_launch
from tilelens.errors import StateError
from tilelens.records import KernelIdentity


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def kernel_identity(fn: Any) -> KernelIdentity:
    """Identity of a ``JITFunction`` or of an ``InterpretedFunction`` (a kernel decorated with TRITON_INTERPRET=1)."""
    if current_launch() is not None:
        raise StateError("TileLens: kernel identity must be computed outside an interpreted launch")
    jit = fn if isinstance(fn, compat.JITFunction) else shadow_jit(fn.fn)
    pyfn = jit.fn
    source = compat.jit_source(jit)
    file = _file(pyfn)
    try:
        cache_key: str | None = jit.cache_key
    except Exception:  # a kernel whose dependencies Triton cannot hash still gets recorded
        cache_key = None
    return KernelIdentity(
        module=pyfn.__module__,
        qualname=pyfn.__qualname__,
        file=file,
        def_line=_def_line(pyfn),
        source=source,
        source_sha256=source_sha256(source),
        cache_key=cache_key,
        file_sha256=file_sha256(file),
    )


# JITFunction -> (its file's (mtime_ns, size) when the identity was made, the identity). Kept for the life of
# the kernel object: a compiled recording made per test or per step otherwise hashed every kernel's file and
# walked its dependencies again at each one's first launch.
_KNOWN: weakref.WeakKeyDictionary[Any, tuple[tuple[int, int] | None, KernelIdentity]] = (
    weakref.WeakKeyDictionary()
)


def known_identity(jit: Any) -> KernelIdentity:
    """``kernel_identity(jit)`` for a ``JITFunction``, made once and kept while its file is unchanged (its
    modification time and size): the file's sha256 is then still the file's. Everything else an identity holds
    is the kernel object's own (its source, its cache key, which Triton computes once)."""
    state = _file_state(_file(jit.fn))
    try:
        known = _KNOWN.get(jit)
    except TypeError:  # not weakly referable: made every time
        return kernel_identity(jit)
    if known is not None and state is not None and known[0] == state:
        return known[1]
    made = kernel_identity(jit)
    _KNOWN[jit] = (state, made)
    return made


def _file_state(path: str) -> tuple[int, int] | None:
    if path.startswith("<"):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def file_sha256(path: str) -> str | None:
    """The whole file's sha256, which replay checks before it runs anything of that file."""
    if path.startswith("<"):
        return None
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _file(pyfn: Any) -> str:
    name = pyfn.__code__.co_filename
    return cast(str, name if name.startswith("<") else os.path.abspath(name))


def _def_line(pyfn: Any) -> int:
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
