"""Find the kernel a launch ran: importable code first, the recorded file next, the recorded source on request.

Replay compares today's kernel against yesterday's record, so what it runs must be named explicitly: by default
the kernel as the code base has it now (imported by module and qualname, or, for a kernel defined in a script or
in a module that is no longer importable, the recorded file loaded under a private module name so its
``if __name__ == "__main__"`` block does not run). Its source hash is compared with the recorded one, and a
changed kernel is refused unless the caller accepts it.

``from_history`` runs the source stored in the history instead. That is code taken from a database, so it
needs an explicit ``trust_source``. It is compiled into a copy of the kernel module's namespace (its helpers and
imports resolve as they did) under a file name that points back at the recorded file, with the recorded line
numbers, so access-trace lines and Triton's error messages stay comparable with the record.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import linecache
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tilelens.core import compat
from tilelens.core.identity import kernel_identity, source_sha256
from tilelens.core.interpreter import compiled_mode, jit_registry_kept, shadow_jit
from tilelens.records import KernelIdentity
from tilelens.replay.result import ReplayFailure

MAX_CHAIN = 64


@dataclass
class ResolvedKernel:
    """The innermost kernel to run (no autotuning, no heuristics) and how it compares with the record."""

    fn: Any  # JITFunction, or InterpretedFunction for a kernel decorated under TRITON_INTERPRET=1
    origin: str  # "import", "file" or "history"
    source_sha256: str
    recorded_sha256: str
    _traced: Any = field(default=None, repr=False)
    _compiled: Any = field(default=None, repr=False)

    @property
    def source_changed(self) -> bool:
        return self.source_sha256 != self.recorded_sha256

    def traced(self) -> Any:
        """A TritonTrace of the kernel, made once: it computes identity and rewrites the AST only once."""
        if self._traced is None:
            from tilelens.core.trace import trace_class

            # No tensor copies in its records: replay compares the rebuilt arguments themselves. A Gluon
            # kernel gets a GluonTrace: it runs in the Gluon simulator.
            self._traced = trace_class(self.fn)(self.fn, in_place=False, snapshots=False)
        return self._traced

    def compiled(self) -> Any:
        """A compiled-mode JITFunction, even when the kernel was decorated under TRITON_INTERPRET=1."""
        if self._compiled is None:
            if isinstance(self.fn, compat.JITFunction):
                self._compiled = self.fn
            else:
                with compiled_mode():
                    self._compiled = shadow_jit(self.fn.fn)
        return self._compiled


class KernelResolver:
    """Resolves kernels for a batch of replays; each kernel version is loaded and traced once per batch."""

    def __init__(self) -> None:
        self._cache: dict[tuple[Any, ...], ResolvedKernel] = {}

    def resolve(self, kernel: KernelIdentity, *, from_history: bool = False) -> ResolvedKernel:
        key = (kernel.module, kernel.qualname, kernel.file, kernel.source_sha256, from_history)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = _from_history(kernel) if from_history else _from_code(kernel)
        return found


def _from_code(kernel: KernelIdentity) -> ResolvedKernel:
    reasons: list[str] = []
    for origin, module in _candidate_modules(kernel, reasons):
        try:
            obj = _walk(module, kernel.qualname)
        except AttributeError:
            reasons.append(f"{origin} {module.__name__} has no {kernel.qualname}")
            continue
        fn = innermost(obj, kernel.name)
        return ResolvedKernel(fn, origin, current_sha256(fn), kernel.source_sha256)
    raise ReplayFailure(f"cannot find kernel {kernel.name}: " + "; ".join(reasons))


def _candidate_modules(kernel: KernelIdentity, reasons: list[str]) -> Iterator[tuple[str, ModuleType]]:
    """The importable module, then the recorded file; lazily, so the file loads only when needed."""
    if kernel.module != "__main__":
        imported = None
        try:
            imported = importlib.import_module(kernel.module)
        except (Exception, SystemExit) as exc:
            reasons.append(f"module {kernel.module} cannot be imported ({type(exc).__name__}: {exc})")
        if imported is not None:
            yield "module", imported
    path = Path(kernel.file)
    if kernel.file.startswith("<") or not path.is_file():
        reasons.append(f"recorded file {kernel.file} does not exist")
        return
    loaded = None
    try:
        loaded = load_file(path)
    except (Exception, SystemExit) as exc:
        reasons.append(f"recorded file {kernel.file} cannot be loaded ({type(exc).__name__}: {exc})")
    if loaded is not None:
        yield "file", loaded


def load_file(path: Path) -> ModuleType:
    """Load a kernel's file as a private module, named by its content so that an edited file loads afresh."""
    data = path.read_bytes()
    digest = hashlib.sha256(str(path).encode() + b"\0" + data).hexdigest()[:16]
    name = f"tilelens_replay_{digest}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with _on_sys_path(str(path.parent)):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


@contextlib.contextmanager
def _on_sys_path(folder: str) -> Iterator[None]:
    """The file's folder on sys.path while it loads, so its sibling imports work as they did when recorded."""
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)


def _walk(module: ModuleType, qualname: str) -> Any:
    obj: Any = module
    for part in qualname.split("."):
        if part == "<locals>":
            raise AttributeError(qualname)
        obj = getattr(obj, part)
    return obj


def innermost(obj: Any, name: str) -> Any:
    """The JITFunction (or GluonJITFunction) under any Autotuner / Heuristics / TileLens trace layers."""
    for _ in range(MAX_CHAIN):
        if isinstance(obj, (compat.JITFunction, compat.InterpretedFunction)):
            return obj
        nxt = getattr(obj, "jit_fn", None) or getattr(obj, "fn", None)
        if nxt is None:
            break
        obj = nxt
    raise ReplayFailure(f"{name} resolves to a {type(obj).__name__}, not a Triton kernel")


def current_sha256(fn: Any) -> str:
    if isinstance(fn, compat.JITFunction):
        return source_sha256(compat.jit_source(fn))
    return kernel_identity(fn).source_sha256


def _from_history(kernel: KernelIdentity) -> ResolvedKernel:
    import triton
    import triton.language as tl

    module = _namespace_module(kernel)
    namespace: dict[str, Any] = dict(vars(module)) if module is not None else {"triton": triton, "tl": tl}
    # A name of its own keeps Triton's "module:qualname" JIT registry entry of the importable kernel intact.
    namespace["__name__"] = f"tilelens_history_{kernel.source_sha256[:16]}"
    filename = f"{kernel.file}@tilelens-history-{kernel.source_sha256[:12]}"
    text = "\n" * max(kernel.def_line - 1, 0) + kernel.source
    if not text.endswith("\n"):
        text += "\n"
    # Triton and inspect read a kernel's source through linecache; an entry without mtime is never evicted.
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    name = kernel.qualname.rsplit(".", 1)[-1]
    try:
        exec(compile(text, filename, "exec"), namespace)  # noqa: S102 (the caller passed trust_source)
        pyfn = namespace[name]
    except Exception as exc:
        raise ReplayFailure(
            f"the recorded source of {kernel.name} cannot be run here ({type(exc).__name__}: {exc})"
        ) from None
    with compiled_mode(), jit_registry_kept(pyfn):
        fn = _jit_like(module, kernel.qualname)(pyfn)
    sha = current_sha256(fn)
    if sha != kernel.source_sha256:
        raise ReplayFailure(f"the recorded source of {kernel.name} does not reproduce its recorded hash")
    return ResolvedKernel(fn, "history", sha, kernel.source_sha256)


def _jit_like(module: ModuleType | None, qualname: str) -> Any:
    """``gluon.jit`` when the code base's kernel of this name is a Gluon kernel, else ``triton.jit``."""
    import triton

    if module is not None:
        try:
            if compat.is_gluon(innermost(_walk(module, qualname), qualname)):
                from triton.experimental import gluon

                return gluon.jit
        except (AttributeError, ReplayFailure):
            pass
    return triton.jit


def _namespace_module(kernel: KernelIdentity) -> ModuleType | None:
    for _origin, module in _candidate_modules(kernel, []):
        return module
    return None
