"""Kernel identity: who a kernel is, stable across processes and machines.

Must be computed outside any interpreted launch: ``JITFunction.cache_key`` walks the kernel's dependencies,
and doing that while the interpreter has patched ``tl`` fails and leaves a permanent ``recursion:`` placeholder
in callees' keys (a poisoned cache key that would also break later compiled launches). Callers check that
(``tilelens.core.interpreted.trace``); an ``InterpretedFunction`` is identified through a ``JITFunction`` of
its function that Triton's registry does not learn about (``tilelens.core.patches.shadow_jit``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import weakref
from typing import Any, cast

from tilelens.core import compat
from tilelens.core.kernel.bundle import def_line_of, kernel_bundle
from tilelens.records import KernelIdentity


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def kernel_identity(jit: Any) -> KernelIdentity:
    """Identity of a ``JITFunction`` (for an ``InterpretedFunction``, of ``patches.shadow_jit(fn.fn)``)."""
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
        def_line=def_line_of(pyfn),
        source=source,
        source_sha256=source_sha256(source),
        cache_key=cache_key,
        file_sha256=file_sha256(file),
        bundle=kernel_bundle(jit),
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
    except Exception:  # not weakly referable, or unhashable (its cache key raises): made every time
        return kernel_identity(jit)
    if known is not None and state is not None and known[0] == state:
        return known[1]
    made = kernel_identity(jit)
    with contextlib.suppress(Exception):
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
