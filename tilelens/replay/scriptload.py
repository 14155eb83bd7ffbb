"""Load a kernel's file without running the file: only its imports, definitions and constant assignments.

A script without an ``if __name__ == "__main__"`` guard launches its kernels at top level (and may write files,
train a model, ask a GPU driver for its device). Loading it to replay one kernel must not do that again, so the
file is parsed and only the statements that *define* things are executed, in a private module namespace:

- ``import`` / ``from ... import`` (the modules they name are imported as usual);
- ``def``, ``async def`` and ``class`` statements, with their decorators (``@triton.jit``, ``@triton.autotune``
  with its configs), default values and class bodies, which run as the definition runs;
- assignments to plain names (``BLOCK = 128``, ``A, B = 1, 2``, ``X: int = 3``) whose value is a *constant
  expression*: literals, names, attribute reads, subscripts, operators, conditional expressions, tuples /
  lists / sets / dicts of those, lambdas with literal defaults, and calls of ``constexpr`` (``tl.constexpr(64)``)
  -- no other call;
- a string expression (a docstring), ``pass``, and ``if`` / ``try`` blocks whose conditions are constant
  expressions, reduced the same way inside.

Everything else is skipped and reported (``with`` blocks, loops, calls, assignments from calls, ``del``...), except
an ``if __name__ == "__main__":`` block, which would not run on import either. Kept statements keep their line
numbers, so tracebacks, Triton's source lines and access-trace lines still point into the real file.
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
from pathlib import Path

from tilelens.replay.trust import KernelFile

_CONSTANT_NODES = (
    ast.Constant,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.Subscript,
    ast.Slice,
    ast.UnaryOp,
    ast.BinOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
    ast.expr_context,
)


@dataclass
class Reduced:
    """The statements kept and the line spans of those skipped (runs of adjacent skipped statements)."""

    body: list[ast.stmt] = field(default_factory=list)
    skipped: list[tuple[int, int]] = field(default_factory=list)
    count: int = 0  # skipped statements

    def describe(self, path: Path) -> str | None:
        """E.g. "skipped 3 top-level statements of script.py (lines 20-31)"; None when nothing was skipped."""
        if not self.count:
            return None
        spans = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.skipped)
        noun = "statement" if self.count == 1 else "statements"
        word = "line" if len(self.skipped) == 1 and self.skipped[0][0] == self.skipped[0][1] else "lines"
        return f"skipped {self.count} top-level {noun} of {path.name} ({word} {spans})"


def reduce_module(tree: ast.Module) -> Reduced:
    out = Reduced()
    out.body = _reduce(tree.body, out)
    return out


def _reduce(body: list[ast.stmt], out: Reduced) -> list[ast.stmt]:
    kept: list[ast.stmt] = []
    last_was_skipped = False
    for stmt in body:
        if _is_main_guard(stmt):
            last_was_skipped = False
            continue
        if isinstance(stmt, (ast.If, ast.Try)) and _compound_allowed(stmt):
            kept.append(_reduce_compound(stmt, out))
            last_was_skipped = False
        elif _allowed(stmt):
            kept.append(stmt)
            last_was_skipped = False
        else:
            out.count += 1
            end = stmt.end_lineno or stmt.lineno
            if last_was_skipped:
                out.skipped[-1] = (out.skipped[-1][0], end)
            else:
                out.skipped.append((stmt.lineno, end))
            last_was_skipped = True
    return kept


def _reduce_compound(stmt: ast.If | ast.Try, out: Reduced) -> ast.stmt:
    def block(stmts: list[ast.stmt]) -> list[ast.stmt]:
        kept = _reduce(stmts, out)
        return kept or [ast.copy_location(ast.Pass(), stmts[0])]

    if isinstance(stmt, ast.If):
        return ast.copy_location(
            ast.If(test=stmt.test, body=block(stmt.body), orelse=block(stmt.orelse) if stmt.orelse else []),
            stmt,
        )
    handlers = [
        ast.copy_location(ast.ExceptHandler(type=h.type, name=h.name, body=block(h.body)), h)
        for h in stmt.handlers
    ]
    return ast.copy_location(
        ast.Try(
            body=block(stmt.body),
            handlers=handlers,
            orelse=block(stmt.orelse) if stmt.orelse else [],
            finalbody=block(stmt.finalbody) if stmt.finalbody else [],
        ),
        stmt,
    )


def _is_main_guard(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
        return False
    t = stmt.test
    sides = [t.left, *t.comparators]
    return (
        len(t.ops) == 1
        and isinstance(t.ops[0], ast.Eq)
        and any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
        and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
    )


def _compound_allowed(stmt: ast.If | ast.Try) -> bool:
    if isinstance(stmt, ast.If):
        return is_constant_expr(stmt.test)
    return all(h.type is None or is_constant_expr(h.type) for h in stmt.handlers)


def _allowed(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
    if isinstance(stmt, ast.Assign):
        return all(_plain_target(t) for t in stmt.targets) and is_constant_expr(stmt.value)
    if isinstance(stmt, ast.AnnAssign):
        return (
            isinstance(stmt.target, ast.Name)
            and is_constant_expr(stmt.annotation)
            and (stmt.value is None or is_constant_expr(stmt.value))
        )
    return False


def _plain_target(target: ast.expr) -> bool:
    if isinstance(target, ast.Name):
        return True
    return isinstance(target, (ast.Tuple, ast.List)) and all(_plain_target(e) for e in target.elts)


def is_constant_expr(node: ast.AST) -> bool:
    """Computes a value from literals and existing names without calling anything but ``constexpr``."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return (
            name == "constexpr"
            and is_constant_expr(func)
            and all(is_constant_expr(a) for a in node.args)
            and all(is_constant_expr(k.value) for k in node.keywords)
        )
    if isinstance(node, ast.Lambda):
        a = node.args
        return all(is_constant_expr(d) for d in (*a.defaults, *(d for d in a.kw_defaults if d is not None)))
    if isinstance(node, ast.Dict):
        return all(k is not None and is_constant_expr(k) for k in node.keys) and all(
            is_constant_expr(v) for v in node.values
        )
    if not isinstance(node, _CONSTANT_NODES):
        return False
    return all(is_constant_expr(child) for child in ast.iter_child_nodes(node))


# -- loading -------------------------------------------------------------------------------------------------


@dataclass
class LoadedScript:
    module: types.ModuleType
    reduced: Reduced


def load_definitions(kfile: KernelFile) -> LoadedScript:
    """Execute the reduced file (the bytes that were checked, not a second read) as a private module.

    Named by path and content, so an edited file loads afresh; registered in ``sys.modules`` (Triton keys
    kernels by ``module:qualname`` and dataclasses look their module up), with the file's folder on
    ``sys.path`` while it loads so its sibling imports work as they did when recorded.
    """
    reduced = reduce_module(kfile.tree)
    path = kfile.path
    digest = hashlib.sha256(str(path).encode() + b"\0" + kfile.data).hexdigest()[:16]
    name = f"tilelens_replay_{digest}"
    existing = sys.modules.get(name)
    if isinstance(existing, types.ModuleType):
        return LoadedScript(existing, reduced)
    code = compile(ast.Module(body=reduced.body, type_ignores=[]), str(path), "exec", dont_inherit=True)
    _cache_lines(kfile)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        with _on_sys_path(str(path.parent)):
            exec(code, module.__dict__)  # noqa: S102 (checked by tilelens.replay.trust, reduced above)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return LoadedScript(module, reduced)


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
