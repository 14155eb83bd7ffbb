"""Kernel identity's def line (``bundle.def_line_of``): found through linecache, equal to what
``inspect.getsourcelines`` gives, for every Liger kernel and for kernels under several decorators."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest
import triton
import triton.language as tl
from triton import knobs

from tilelens.core import compat
from tilelens.core.kernel.bundle import _DEF_LINES
from tilelens.core.kernel.bundle import def_line_of as _def_line
from tilelens.core.kernel.identity import kernel_identity


def _by_inspect(pyfn: Any) -> int:
    lines, start = inspect.getsourcelines(pyfn)
    return next((start + i for i, line in enumerate(lines) if line.strip().startswith("def ")), start)


with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.autotune(
        configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})],
        key=["n"],
    )
    @triton.heuristics(
        {
            "EVEN": lambda a: a["n"] % 2 == 0,  # a decorator over several lines, "def " in none of them
        }
    )
    @triton.jit
    def decorated(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), 0.0, mask=tl.arange(0, BLOCK) < n)


def _leaf(obj: Any) -> Any:
    while isinstance(obj, (compat.Autotuner, compat.Heuristics)):
        obj = obj.fn
    return obj


def test_def_line_of_a_kernel_under_three_decorators() -> None:
    jit = _leaf(decorated)
    line = _def_line(jit.fn)
    assert line == _by_inspect(jit.fn) == jit.fn.__code__.co_firstlineno + 10
    assert _DEF_LINES[jit.fn.__code__] == line
    assert kernel_identity(jit).def_line == line


def test_def_line_equals_inspect_for_every_liger_kernel() -> None:
    ops = pytest.importorskip("liger_kernel.ops")
    seen = 0
    for info in pkgutil.iter_modules(ops.__path__):
        try:
            module = importlib.import_module(f"liger_kernel.ops.{info.name}")
        except Exception:  # noqa: BLE001 - a Liger module this Triton cannot import is not ours to test
            continue
        for value in vars(module).values():
            jit = _leaf(value)
            # JITFunction, or InterpretedFunction where another test imported Liger with TRITON_INTERPRET=1
            kernel = isinstance(jit, (compat.JITFunction, compat.InterpretedFunction))
            if kernel and jit.fn.__module__ == module.__name__:
                assert _def_line(jit.fn) == _by_inspect(jit.fn), (module.__name__, jit.fn.__name__)
                seen += 1
    assert seen >= 50


KERNEL_FILE = """
import triton
import triton.language as tl
from triton import knobs

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def twice(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
"""


def test_a_kernels_identity_is_made_once_while_its_file_is_unchanged(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``known_identity`` (what a compiled recording takes at a kernel's first launch) keeps the identity for
    the kernel object while its file's modification time and size stay: recordings after the first neither
    hash the file nor walk the kernel again. An edited file makes it anew, with the new file's sha256."""
    import hashlib
    import sys

    from tilelens.core.kernel import identity

    path = tmp_path / "tl_identity_kernel.py"
    path.write_text(KERNEL_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("tl_identity_kernel")
    monkeypatch.setitem(sys.modules, "tl_identity_kernel", module)
    made: list[Any] = []

    def counting(fn: Any) -> Any:
        made.append(fn)
        return kernel_identity(fn)

    monkeypatch.setattr(identity, "kernel_identity", counting)
    first = identity.known_identity(module.twice)
    assert identity.known_identity(module.twice) is first and len(made) == 1
    assert first.file_sha256 == hashlib.sha256(KERNEL_FILE.encode()).hexdigest()
    path.write_text(KERNEL_FILE + "# edited\n")
    edited = identity.known_identity(module.twice)
    assert (
        len(made) == 2
        and edited.file_sha256 == hashlib.sha256((KERNEL_FILE + "# edited\n").encode()).hexdigest()
    )
    assert edited.source_sha256 == first.source_sha256  # the kernel object's own source: unchanged
    assert identity.known_identity(module.twice) is edited and len(made) == 2
