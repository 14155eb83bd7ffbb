"""Find the kernel a launch ran: importable code first, the recorded file next, the recorded source on request.

Replay compares today's kernel against yesterday's record, so what it runs must be named explicitly: by default
the kernel as the code base has it now (imported by module and qualname, or, for a kernel defined in a script or
in a module that is no longer importable, the recorded file's definitions loaded under a private module name,
without its top-level statements). Nothing runs before :mod:`tilelens.replay.trust` has located the code
without executing it, found the kernel's definition in it and compared the kernel's and the whole file's
sha256 with the record; changed code runs only when the caller allows it.

``from_history`` runs the source stored in the history instead. That is code taken from a database, so it
needs an explicit ``trust_source``, and the stored text must hash to the recorded sha256 and be one plain
``def`` (checked before it runs). It is compiled into a copy of the kernel module's namespace (its helpers and
imports resolve as they did) under a file name that points back at the recorded file, with the recorded line
numbers, so access-trace lines and Triton's error messages stay comparable with the record.
"""

from __future__ import annotations

import importlib
import linecache
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tilelens.core import compat
from tilelens.core.kernel.identity import source_sha256
from tilelens.core.patches import compiled_mode, jit_registry_kept, shadow_jit
from tilelens.records import KernelIdentity
from tilelens.replay import scriptload, trust
from tilelens.replay.result import ReplayFailure

MAX_CHAIN = 64


@dataclass
class ResolvedKernel:
    """The innermost kernel to run (no autotuning, no heuristics) and how it compares with the record."""

    fn: Any  # JITFunction, or InterpretedFunction for a kernel decorated under TRITON_INTERPRET=1
    origin: str  # "module", "file" or "history"
    source_sha256: str
    recorded_sha256: str
    file_changed: bool = False  # the kernel's file differs from the one recorded (allowed by the caller)
    skipped: str | None = None  # "skipped N top-level statements of F (lines ...)" for a sliced load
    # Statements of the kernel's slice that raised when it loaded ("line N: Error: ..."): what they would have
    # made is missing, so a replay that then raises is an error of the load, not a mismatch of the kernel.
    load_failed: tuple[str, ...] = ()
    _traced: Any = field(default=None, repr=False)
    _compiled: Any = field(default=None, repr=False)

    @property
    def source_changed(self) -> bool:
        return self.source_sha256 != self.recorded_sha256

    def traced(self) -> Any:
        """A TritonTrace of the kernel, made once: it computes identity and rewrites the AST only once."""
        if self._traced is None:
            from tilelens.core.interpreted.trace import trace_class

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
    """Resolves kernels for a batch of replays; each kernel version is loaded and traced once per batch.

    ``data_folders`` (the blob folder) are never searched for code; ``allow_changed`` lets a kernel or file
    that differs from the record run.
    """

    def __init__(self, data_folders: tuple[Path, ...] = (), allow_changed: bool = False) -> None:
        self._cache: dict[tuple[Any, ...], ResolvedKernel] = {}
        self.data_folders = data_folders
        self.allow_changed = allow_changed

    def resolve(
        self, kernel: KernelIdentity, *, from_history: bool = False, bundle: dict[str, Any] | None = None
    ) -> ResolvedKernel:
        """``bundle``: the launch's recorded bundle (``tilelens.core.kernel.bundle``), which ``from_history``
        runs when there is one (the kernel and its jit callees as recorded), else the kernel's source alone."""
        key = (
            kernel.module,
            kernel.qualname,
            kernel.file,
            kernel.source_sha256,
            kernel.file_sha256,
            from_history,
            None if bundle is None or not from_history else id(bundle),
        )
        found = self._cache.get(key)
        if found is None:
            if from_history and bundle is not None:
                found = _from_bundle(kernel, bundle)
            elif from_history:
                found = _from_history(kernel, self.data_folders)
            else:
                found = _from_code(kernel, self.data_folders, self.allow_changed)
            self._cache[key] = found
        return found


def _from_code(kernel: KernelIdentity, data_folders: tuple[Path, ...], allow_changed: bool) -> ResolvedKernel:
    reasons: list[str] = []
    for origin, kfile in _candidates(kernel, data_folders, reasons):
        _check_unchanged(kernel, origin, kfile, allow_changed)
        try:
            module, skipped, failed = _load(origin, kernel, kfile)
        except (Exception, SystemExit) as exc:
            reasons.append(f"{_what(origin, kernel, kfile)} cannot be loaded ({type(exc).__name__}: {exc})")
            continue
        try:
            obj = _walk(module, kernel.qualname)
        except AttributeError:
            why = f" ({skipped})" if skipped else ""
            reasons.append(f"{_what(origin, kernel, kfile)} has no {kernel.qualname} once loaded{why}")
            continue
        fn = innermost(obj, kernel.name)
        file_changed = kernel.file_sha256 is not None and kfile.sha256 != kernel.file_sha256
        sha = current_sha256(fn)
        return ResolvedKernel(fn, origin, sha, kernel.source_sha256, file_changed, skipped, failed)
    raise ReplayFailure(f"cannot find kernel {kernel.name}: " + "; ".join(reasons))


def _what(origin: str, kernel: KernelIdentity, kfile: trust.KernelFile) -> str:
    return f"module {kernel.module} ({kfile.path})" if origin == "module" else f"recorded file {kfile.path}"


def _candidates(
    kernel: KernelIdentity, data_folders: tuple[Path, ...], reasons: list[str], *, need_kernel: bool = True
) -> list[tuple[str, trust.KernelFile]]:
    """The files that may run for this kernel, checked and parsed but not executed: the module ``import``
    would load (only when it defines the kernel), then the recorded file. With ``need_kernel`` a file must
    define the kernel at its qualname, decorated as a Triton kernel."""
    found: list[tuple[str, trust.KernelFile]] = []
    paths: list[tuple[str, Path]] = []
    located = trust.locate_module(kernel.module)
    if located is not None:
        paths.append(("module", located))
    elif kernel.module != "__main__":
        reasons.append(f"module {kernel.module} cannot be located as a Python source file")
    try:
        recorded = trust.recorded_path(kernel.file, data_folders)
    except trust.UntrustedCode as exc:
        reasons.append(str(exc))
    else:
        if located is None or not located.samefile(recorded):
            paths.append(("file", recorded))
    for origin, path in paths:
        label = f"module {kernel.module} ({path})" if origin == "module" else f"recorded file {path}"
        try:
            trust.checked_location(path, data_folders)
            kfile = trust.read_kernel_file(path, kernel.qualname)
        except trust.UntrustedCode as exc:
            reasons.append(f"{label}: {exc}")
            continue
        if origin == "module" or need_kernel:
            if not kfile.defs:
                reasons.append(f"{label} does not define {kernel.qualname}")
                continue
            if not kfile.kernel_defs():
                reasons.append(
                    f"{label} defines {kernel.qualname} without a Triton kernel decorator (@triton.jit, "
                    "@triton.autotune, @triton.heuristics)"
                )
                continue
        found.append((origin, kfile))
    return found


def _check_unchanged(
    kernel: KernelIdentity, origin: str, kfile: trust.KernelFile, allow_changed: bool
) -> None:
    """Refuse, before anything of it runs, a file whose kernel or whole content differs from the record."""
    if allow_changed:
        return
    now = kfile.kernel_sha256(kernel.source_sha256)
    if now != kernel.source_sha256:
        raise ReplayFailure(
            f"source changed: {kernel.name} ({origin} {kfile.path}) hashes to {str(now)[:12]}, the recorded "
            f"source to {kernel.source_sha256[:12]}",
            reason="source-changed",
        )
    if kernel.file_sha256 is not None and kfile.sha256 != kernel.file_sha256:
        raise ReplayFailure(
            f"file changed: {kfile.path} hashes to {kfile.sha256[:12]}, the file recorded with {kernel.name} "
            f"to {kernel.file_sha256[:12]} (the kernel's own source is unchanged)",
            reason="file-changed",
        )


def _load(
    origin: str, kernel: KernelIdentity, kfile: trust.KernelFile
) -> tuple[ModuleType, str | None, tuple[str, ...]]:
    """Import the module, or load the slice of the file the kernel needs; what the load skipped, said in
    words, and the slice's statements that raised."""
    if origin == "module":
        with trust.without_implicit_cwd():  # the module that was located, not one in the working directory
            return importlib.import_module(kernel.module), None, ()
    loaded = scriptload.load_definitions(kfile, kernel.qualname, as_main=kernel.module == "__main__")
    return loaded.module, loaded.describe(), tuple(loaded.failed)


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
    jit = fn if isinstance(fn, compat.JITFunction) else shadow_jit(fn.fn)
    return source_sha256(compat.jit_source(jit))


def _from_history(kernel: KernelIdentity, data_folders: tuple[Path, ...]) -> ResolvedKernel:
    import triton
    import triton.language as tl

    # Before anything runs: the stored text is exactly the recorded kernel definition and nothing else.
    trust.check_stored_source(kernel.source, kernel.source_sha256, kernel.qualname, kernel.def_line)
    module, skipped = _namespace_module(kernel, data_folders)
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
        exec(compile(text, filename, "exec"), namespace)  # noqa: S102 (trust_source, and checked above)
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
    return ResolvedKernel(fn, "history", sha, kernel.source_sha256, skipped=skipped)


def _from_bundle(kernel: KernelIdentity, bundle: dict[str, Any]) -> ResolvedKernel:
    """The kernel and its jit callees as the launch's bundle recorded them (``--from-history --trust-source``).

    Before anything runs, every unit's source must be one plain definition (the rule for stored source, per
    unit) and the entry's must hash to the recorded source_sha256; then each unit is defined in a namespace of
    its own, its imports imported and its recorded values set (``repro_script.kernel_from_bundle``)."""
    from tilelens.replay import repro_script

    try:
        units = list(bundle["units"])
        entry = next(u for u in units if u["key"] == bundle["entry"])
        for unit in units:
            source = str(unit["source"])
            sha = source_sha256(source) if unit is not entry else kernel.source_sha256
            trust.check_stored_source(source, sha, str(unit["name"]), int(unit["line"]))
    except (KeyError, TypeError, ValueError, StopIteration) as exc:
        raise trust.UntrustedCode(
            f"the recorded bundle of {kernel.name} is malformed ({type(exc).__name__})"
        ) from None
    try:
        with compiled_mode():
            fn = repro_script.kernel_from_bundle(bundle)
    except Exception as exc:
        raise ReplayFailure(
            f"the recorded bundle of {kernel.name} cannot be run here ({type(exc).__name__}: {exc})"
        ) from None
    sha = current_sha256(fn)
    if sha != kernel.source_sha256:
        raise ReplayFailure(f"the recorded bundle of {kernel.name} does not reproduce its recorded hash")
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


def _namespace_module(
    kernel: KernelIdentity, data_folders: tuple[Path, ...]
) -> tuple[ModuleType | None, str | None]:
    """The kernel's module for the recorded source's globals (helpers, imports). The code may have changed
    since the record (that is why the recorded source runs), so hashes are not compared; the locations are
    checked as always, and a module is imported only if it still defines the kernel."""
    for origin, kfile in _candidates(kernel, data_folders, [], need_kernel=False):
        try:
            module, skipped, _failed = _load(origin, kernel, kfile)
            return module, skipped
        except (Exception, SystemExit):
            continue
    return None, None
