"""What replay may execute, decided before any of it runs.

A history is data that anyone can edit, and a project folder with a ``.tilelens/`` in it can come from anyone,
so nothing a history says is taken as a reason to run code. The history only *names* a kernel (module, file,
qualname, source, hashes); what runs must be found on this machine and checked against those names first:

- A recorded file path must be absolute (TileLens records absolute paths; a relative one was edited in and is
  never resolved against the working directory), name an existing ``.py`` file, and lie outside the folders
  that hold data: the blob folder and any ``.tilelens`` folder. It is resolved (every symbolic link, step by
  step) before any check and used resolved; a path that passes through ``/proc``, ``/dev`` or ``/sys`` on the
  way (``/proc/self/cwd/x.py`` is the working directory's ``x.py``) is refused.
- A module is located the way ``import`` would locate it (``sys.meta_path`` finders, parent packages' search
  paths) without executing anything, and must resolve to a ``.py`` source file too. ``__main__`` never does.
  The working directory that ``python -m tilelens`` puts first on ``sys.path`` is left out (while locating
  and importing), unless the user's own ``PYTHONPATH`` or another entry of ``sys.path`` names it too: a
  module an edited history names is never picked up from the folder replay happens to run in.
- The file is read once and parsed (never executed) to find the ``def`` at the recorded qualname, decorated as a
  Triton kernel (a decorator named ``*jit``, ``autotune``, ``heuristics`` or ``trace``). A module or file that
  does not define the kernel is never imported (``module='this'`` finds no kernel in ``this.py``).
- The kernel's source is cut out of the parsed file exactly as Triton cuts it (``inspect``'s block, dedented,
  from ``def``) and its sha256 compared with the recorded one, and the whole file's sha256 with the one
  recorded at the launch. Either difference refuses the replay unless the caller allows changed code.

These checks bind what runs to what exists on disk; they do not make a received project's own code safe:
replaying its kernels runs them (a kernel's body is Python code to the interpreter).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.machinery
import inspect
import io
import os
import re
import sys
import textwrap
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tilelens.errors import ReplayFailure

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_DEF = re.compile(r"^def\s+\w+\s*\(", re.MULTILINE)  # Triton's own cut (triton/runtime/jit.py)
KERNEL_DECORATORS = ("autotune", "heuristics", "trace")  # plus any name ending in "jit"
DATA_FOLDER = ".tilelens"
MAX_DEF_LINE = 1_000_000


class UntrustedCode(ReplayFailure):
    """Replay refused to run code the history points at; the message says why and what would allow it."""


@dataclass(frozen=True)
class KernelFile:
    """A kernel's file as read (once) and parsed (never executed) before anything of it runs."""

    path: Path
    data: bytes
    lines: list[str]  # as linecache holds them, which is what inspect and Triton cut kernels from
    tree: ast.Module
    defs: tuple[ast.FunctionDef | ast.AsyncFunctionDef, ...]  # at the qualname, in file order

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def kernel_defs(self) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        return [d for d in self.defs if is_kernel_def(d)]

    def kernel_sha256(self, recorded: str) -> str | None:
        """``recorded`` if one of the kernel's definitions hashes to it, else the last one's hash (the
        definition Python keeps)."""
        hashes = [source_sha256(s) for d in self.kernel_defs() if (s := kernel_source(self.lines, d))]
        if recorded in hashes:
            return recorded
        return hashes[-1] if hashes else None


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


# -- where the code is ---------------------------------------------------------------------------------------


def recorded_path(text: str, data_folders: tuple[Path, ...]) -> Path:
    """The recorded file, resolved, if replay may read it at all; raises :class:`UntrustedCode` otherwise."""
    if not text or text.startswith("<"):
        raise UntrustedCode(f"recorded file {text or '(none)'} does not exist")
    path = Path(text)
    if not path.is_absolute():
        raise UntrustedCode(
            f"recorded file {text!r} is a relative path; TileLens records absolute paths, so the history was "
            "edited, and replay never resolves it against the working directory"
        )
    return checked_location(path, data_folders)


PSEUDO_FILESYSTEMS = ("proc", "dev", "sys")
_MAX_LINKS = 40


def resolved(path: Path) -> Path:
    """``path`` with every symbolic link resolved, one component at a time, refusing a path that passes
    through ``/proc``, ``/dev`` or ``/sys`` at any step (their links lead to whatever a process has open, its
    working directory included)."""

    def refuse_pseudo(where: str) -> None:
        parts = Path(os.path.normpath(where)).parts
        if len(parts) > 1 and parts[1] in PSEUDO_FILESYSTEMS:
            raise UntrustedCode(
                f"{path} leads through /{parts[1]}; replay never reads code from a pseudo file system"
            )

    pending = list(Path(os.path.abspath(path)).parts[1:])
    done = "/"
    links = 0
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            done = os.path.dirname(done)
            continue
        candidate = os.path.join(done, name)
        refuse_pseudo(candidate)
        if os.path.islink(candidate):
            links += 1
            if links > _MAX_LINKS:
                raise UntrustedCode(f"{path}: too many levels of symbolic links")
            target = os.readlink(candidate)
            if os.path.isabs(target):
                done = "/"
            refuse_pseudo(os.path.join(done, target))
            pending = list(Path(target).parts[1:] if os.path.isabs(target) else Path(target).parts) + pending
            continue
        done = candidate
    return Path(done)


def checked_location(path: Path, data_folders: tuple[Path, ...]) -> Path:
    """``path``, resolved, if it is an existing ``.py`` file outside the folders that hold data."""
    path = resolved(path)
    if not path.is_file():
        raise UntrustedCode(f"recorded file {path} does not exist")
    if path.suffix != ".py":
        raise UntrustedCode(f"{path} is not a Python source file (.py)")
    real = Path(os.path.realpath(path))
    inside = [f for f in data_folders if real.is_relative_to(Path(os.path.realpath(f)))]
    if DATA_FOLDER in real.parts[:-1] or inside:
        raise UntrustedCode(
            f"{path} lies in a folder that holds history data; replay never runs code from there"
        )
    return path


def locate_module(name: str) -> Path | None:
    """The ``.py`` file ``import name`` would execute, found without executing anything.

    Parent packages are not imported: each level is asked of ``sys.meta_path``'s finders with the parent's
    search locations, as the import system does. None for ``__main__``, names that are not dotted
    identifiers, modules that do not resolve, and modules that are not source files (builtins, extensions).
    """
    if name == "__main__" or not _DOTTED.match(name):
        return None
    with without_implicit_cwd():
        return _locate(name)


def _locate(name: str) -> Path | None:
    loaded = sys.modules.get(name)
    if loaded is not None:
        return _source_file(getattr(loaded, "__file__", None))
    parts = name.split(".")
    search: list[str] | None = None
    spec = None
    for i in range(len(parts)):
        sub = ".".join(parts[: i + 1])
        parent = sys.modules.get(sub) if i < len(parts) - 1 else None
        if parent is not None:
            search = list(getattr(parent, "__path__", None) or []) or None
            if search is None:
                return None
            continue
        spec = _find_spec(sub, search)
        if spec is None:
            return None
        if i < len(parts) - 1:
            locations = spec.submodule_search_locations
            if locations is None:
                return None
            search = list(locations)
    if spec is None or not spec.has_location:
        return None
    return _source_file(spec.origin)


def implicit_cwd_entry() -> int | None:
    """The index of ``sys.path``'s first entry when it is the working directory that ``python -m`` or
    ``python -c`` put there ('' or the folder itself), and nothing else of the user's names that folder
    (``PYTHONPATH``, another ``sys.path`` entry); None otherwise."""
    if not sys.path:
        return None
    first = sys.path[0]
    cwd = os.path.realpath(os.getcwd())
    if first != "" and os.path.realpath(first) != cwd:
        return None
    others = [*sys.path[1:], *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    if any(p and os.path.realpath(p) == cwd for p in others):
        return None
    return 0


@contextlib.contextmanager
def without_implicit_cwd() -> Iterator[None]:
    """``sys.path`` without :func:`implicit_cwd_entry` inside the block (the entry is put back after)."""
    index = implicit_cwd_entry()
    if index is None:
        yield
        return
    entry = sys.path.pop(index)
    try:
        yield
    finally:
        sys.path.insert(index, entry)


def _find_spec(name: str, path: list[str] | None) -> importlib.machinery.ModuleSpec | None:
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, path, None)
        except Exception:  # a broken finder: the module is not locatable, as far as replay is concerned
            return None
        if spec is not None:
            return spec
    return None


def _source_file(origin: object) -> Path | None:
    if not isinstance(origin, str) or not origin.endswith(".py") or not os.path.isfile(origin):
        return None
    try:
        return resolved(Path(origin))
    except UntrustedCode:
        return None


# -- what the code is ----------------------------------------------------------------------------------------


def read_kernel_file(path: Path, qualname: str) -> KernelFile:
    """Read and parse ``path`` (nothing of it runs) and find the definitions at ``qualname``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UntrustedCode(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        tree = ast.parse(data, filename=str(path))
        lines = source_lines(data)
    except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
        raise UntrustedCode(f"{path} is not valid Python ({type(exc).__name__}: {exc})") from None
    return KernelFile(path, data, lines, tree, tuple(find_defs(tree, qualname)))


def source_lines(data: bytes) -> list[str]:
    """The lines linecache would hold for a file with these bytes (``tokenize.open``: its encoding,
    universal newlines), with the final newline linecache adds."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = io.TextIOWrapper(io.BytesIO(data), encoding, newline=None).read()
    lines = io.StringIO(text).readlines()
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines


def find_defs(tree: ast.Module, qualname: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Definitions whose ``__qualname__`` would be ``qualname``: classes and functions nested in the module
    and classes, also inside ``if``/``try``/``with``/loop blocks (which do not open a scope)."""
    parts = qualname.split(".")
    if not qualname or "<locals>" in parts:
        return []
    scopes: list[list[ast.stmt]] = [tree.body]
    for part in parts[:-1]:
        scopes = [c.body for body in scopes for c in _named(body, part) if isinstance(c, ast.ClassDef)]
    return [
        d
        for body in scopes
        for d in _named(body, parts[-1])
        if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def _named(body: list[ast.stmt], name: str) -> list[ast.stmt]:
    found: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if stmt.name == name:
                found.append(stmt)
            continue  # a def or class body is another scope
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(stmt, field, None) or []:
                inner = child.body if isinstance(child, (ast.ExceptHandler, ast.match_case)) else [child]
                found += _named(inner, name)
    return found


def is_kernel_def(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated as a Triton kernel: ``@triton.jit``, ``@jit(...)``, ``@triton.autotune(...)``,
    ``@triton.heuristics(...)``, ``@tilelens.trace``, or any decorator whose name ends in ``jit``."""
    if isinstance(node, ast.AsyncFunctionDef):
        return False
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        last = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if last.endswith("jit") or last in KERNEL_DECORATORS:
            return True
    return False


def kernel_source(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The kernel's source as Triton's ``JITFunction`` takes it: ``inspect.getsourcelines`` (the block from
    the first decorator line, which is the code object's ``co_firstlineno``), dedented, cut at ``def``."""
    first = min([d.lineno for d in node.decorator_list] + [node.lineno])
    try:
        block = inspect.getblock(lines[first - 1 :])
    except (IndexError, SyntaxError, tokenize.TokenError):
        return None
    src = textwrap.dedent("".join(block))
    match = _DEF.search(src)
    return src[match.start() :] if match else None


# -- recorded source (--from-history --trust-source) ---------------------------------------------------------


def check_stored_source(source: str, recorded_sha256: str, qualname: str, def_line: int) -> None:
    """Refuse stored kernel source that is not exactly one plain kernel definition, before it runs.

    The source must hash to the recorded sha256 and parse to a single undecorated ``def`` of the kernel's
    name (Triton's cut starts at ``def``), whose default values are literals or names and whose annotations
    are names (``tl.constexpr``): executing such a statement only binds a function, so no code of the history runs
    until the kernel itself is interpreted, which is what ``--trust-source`` allows.
    """
    if source_sha256(source) != recorded_sha256:
        raise UntrustedCode(
            "the stored source does not hash to the recorded source_sha256: the history was edited"
        )
    if not 1 <= def_line <= MAX_DEF_LINE:
        raise UntrustedCode(f"the recorded def line {def_line} is out of range: the history was edited")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise UntrustedCode(f"the stored source is not valid Python ({type(exc).__name__}: {exc})") from None
    name = qualname.rsplit(".", 1)[-1]
    body = tree.body
    if len(body) != 1 or not isinstance(body[0], ast.FunctionDef) or body[0].name != name:
        raise UntrustedCode(
            f"the stored source is not just the definition of {name}: it holds other statements, so the "
            "history was edited; nothing was run"
        )
    node = body[0]
    a = node.args
    defaults = [*a.defaults, *(d for d in a.kw_defaults if d is not None)]
    annotations = [
        x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None
    ] + [node.returns]
    if (
        node.decorator_list
        or not all(_literal(d) for d in defaults)
        or not all(_annotation(x) for x in annotations)
    ):
        raise UntrustedCode(
            f"the stored definition of {name} has decorators, defaults or annotations that would run code "
            "when it is defined; nothing was run"
        )


def _literal(node: ast.expr) -> bool:
    """A literal (``128``, ``-1.0``, ``None``) or a dotted name (``tl.float32``): nothing is called."""
    if _annotation(node):
        return True
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _annotation(node: ast.expr | None) -> bool:
    if node is None or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return True
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)
