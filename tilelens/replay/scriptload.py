"""Load a kernel's file without running the file: only the slice of it the kernel needs.

A script without an ``if __name__ == "__main__"`` guard launches its kernels at top level (and may write files,
train a model, ask a GPU driver for its device). Loading it to replay one kernel must not do that again, so the
file is parsed and only the statements the kernel needs are executed (:mod:`tilelens.replay.slicing`: its
``def`` with its decorators, the functions it calls, the module-level names those read, and the imports they
come from), in a private module namespace. Everything else is skipped and reported. A statement of the slice
that fails is named with its line, and the replay fails only when the kernel really needed what it would have
made. Kept statements keep their line numbers, so tracebacks, Triton's source lines and access-trace lines
still point into the real file.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import linecache
import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field

from tilelens.replay.slicing import Slice, future_flags, kernel_slice
from tilelens.replay.trust import KernelFile

# -- loading -------------------------------------------------------------------------------------------------


@dataclass
class LoadedScript:
    module: types.ModuleType
    slice: Slice
    failed: list[str] = field(
        default_factory=list
    )  # "line N: Error: message" per slice statement that failed

    def describe(self) -> str | None:
        """What the load left out and what of it failed, in words; None when it ran the whole file."""
        parts = [self.slice.describe(os.path.basename(str(self.module.__file__)))]
        parts += [f"{f} (not run)" for f in self.failed]
        return "; ".join(p for p in parts if p) or None


def load_definitions(kfile: KernelFile, qualname: str, as_main: bool = False) -> LoadedScript:
    """Execute the slice of the file the kernel at ``qualname`` needs (the bytes that were checked, not a
    second read) as a private module; ``as_main``: the kernel was recorded in ``__main__``, so its
    ``if __name__ == "__main__":`` block had run.

    Statement by statement: one that raises is named (``failed``) and the others still run. Named by path,
    content and kernel, so an edited file loads afresh; registered in ``sys.modules`` (Triton keys kernels by
    ``module:qualname`` and dataclasses look their module up), with the file's folder on ``sys.path`` while it
    loads so its sibling imports work as they did when recorded.
    """
    text = kfile.data.decode("utf-8", errors="replace")
    sliced = kernel_slice(kfile.tree, "".join(kfile.lines) or text, qualname, as_main)
    path = kfile.path
    key = f"{path}\0{qualname}\0{as_main}".encode() + b"\0" + kfile.data
    name = f"tilelens_replay_{hashlib.sha256(key).hexdigest()[:16]}"
    existing = sys.modules.get(name)
    if isinstance(existing, types.ModuleType):
        return LoadedScript(existing, sliced, list(_FAILED.get(name, [])))
    flags = future_flags(kfile.tree)
    _cache_lines(kfile)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    failed: list[str] = []
    try:
        with _on_sys_path(str(path.parent)):
            for stmt in sliced.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                    continue  # its flag is given to every compile below
                code = compile(
                    ast.Module(body=[stmt], type_ignores=[]),
                    str(path),
                    "exec",
                    flags=flags,
                    dont_inherit=True,
                )
                try:
                    exec(code, module.__dict__)  # noqa: S102 (checked by tilelens.replay.trust; the slice)
                except (Exception, SystemExit) as exc:
                    failed.append(f"line {stmt.lineno}: {type(exc).__name__}: {' '.join(str(exc).split())}")
    except BaseException:
        sys.modules.pop(name, None)
        raise
    _FAILED[name] = list(failed)
    return LoadedScript(module, sliced, failed)


_FAILED: dict[str, list[str]] = {}  # private module name -> the slice statements that failed when it loaded


def _cache_lines(kfile: KernelFile) -> None:
    """What inspect (hence Triton) reads for this file: the checked lines, kept only while the file on disk
    has the size and mtime it had when read, since ``inspect`` calls ``linecache.checkcache`` first."""
    try:
        st = os.stat(kfile.path)
    except OSError:
        return
    if st.st_size == len(kfile.data):
        name = str(kfile.path)
        linecache.cache[name] = (st.st_size, st.st_mtime, list(kfile.lines), name)


@contextlib.contextmanager
def _on_sys_path(folder: str) -> Iterator[None]:
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)
