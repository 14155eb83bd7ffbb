"""The part of a kernel's file that the kernel needs: what replay runs when it loads the file as a script.

A reproduction script defines its kernel at top level between code that reads the environment, launches,
prints and parses arguments. Running the whole file again would do all that; running only the definitions
breaks as soon as one of them reads a name an unrun statement assigned. So the loader runs the *slice*: the
kernel's ``def`` with its decorators, and, transitively, every top-level statement that binds (or changes) a
module-level name that a statement already in the slice reads -- in its decorators, default values,
annotations, or anywhere in the body of a function or class it defines (its jit callees, constexpr globals,
helper modules, autotune config lists, heuristics lambdas, ``functools.partial`` objects), and the imports
those names come from.

How names are told apart, without running anything: a statement *binds* a name when it assigns it at module
level (``=``, ``+=``, annotations, ``for``/``with`` targets, ``import``, ``def``, ``class``, ``except ... as``)
and *changes* it when it assigns into it (``X[k] = ...``, ``X.a = ...``) or calls a method of it as a
statement (``CONFIGS.append(...)``). A statement *reads* the names its module-scope expressions load, plus the
names the functions, lambdas, classes and comprehensions it defines read from the module (Python's own
``symtable`` decides what is local to them). A compound statement (``if``, ``for``, ``while``, ``with``,
``try``) in the slice keeps only its parts that bind or change needed names, and its conditions, iterables and
context managers, which it reads. An ``if __name__ == "__main__":`` block counts only for a kernel recorded in
``__main__`` (it ran then): its needed parts run unconditionally.

Invariants: a statement is in the slice only if the kernel needs a name it binds or changes (possibly through
other statements); the slice keeps the file's order and line numbers; everything else is skipped and counted.
"""

from __future__ import annotations

import ast
import copy
import symtable
from dataclasses import dataclass, field

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass
class Slice:
    """The statements to run, in file order (compound ones reduced), and what was left out."""

    body: list[ast.stmt] = field(default_factory=list)
    skipped: list[tuple[int, int]] = field(
        default_factory=list
    )  # line spans of top-level statements left out
    count: int = 0  # top-level statements left out

    def describe(self, name: str) -> str | None:
        """E.g. "skipped 3 top-level statements of script.py (lines 20-31)"; None when nothing was."""
        if not self.count:
            return None
        spans = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in self.skipped)
        noun = "statement" if self.count == 1 else "statements"
        word = "line" if len(self.skipped) == 1 and self.skipped[0][0] == self.skipped[0][1] else "lines"
        return f"skipped {self.count} top-level {noun} of {name} ({word} {spans})"


def kernel_slice(tree: ast.Module, source: str, qualname: str, as_main: bool = False) -> Slice:
    """The statements of ``tree`` (parsed from ``source``) that the definition at ``qualname`` needs."""
    reads = _Reads(source)
    top = tree.body
    name = qualname.split(".", 1)[0]
    needed: set[str] = set()
    pending = {name}
    while pending:
        n = pending.pop()
        needed.add(n)
        for stmt in top:
            part = _reduced(stmt, needed, as_main)
            if part is not None:
                pending |= reads.of(part) - needed
    out = Slice()
    last_skipped = False
    for stmt in top:
        part = _reduced(stmt, needed, as_main)
        if part is not None:
            out.body.append(part)
            last_skipped = False
            continue
        out.count += 1
        end = stmt.end_lineno or stmt.lineno
        if last_skipped:
            out.skipped[-1] = (out.skipped[-1][0], end)
        else:
            out.skipped.append((_first_line(stmt), end))
        last_skipped = True
    return out


def future_flags(tree: ast.Module) -> int:
    """The compiler flags of the file's ``from __future__`` imports (each slice statement compiles alone)."""
    import __future__

    flags = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            for alias in stmt.names:
                feature = getattr(__future__, alias.name, None)
                flags |= getattr(feature, "compiler_flag", 0)
    return flags


# -- what a statement binds, changes and reads --------------------------------------------------------------


def _reduced(stmt: ast.stmt, needed: set[str], as_main: bool) -> ast.stmt | None:
    """``stmt`` as far as it binds or changes a needed name: itself (simple statements), its reduced form
    (compound ones), or None."""
    if _is_main_guard(stmt):
        if not as_main:
            return None
        assert isinstance(stmt, ast.If)
        body = _reduced_block(stmt.body, needed, as_main)
        if not body:
            return None
        return ast.copy_location(ast.If(test=ast.Constant(True), body=body, orelse=[]), stmt)
    if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)):
        return _reduced_compound(stmt, needed, as_main)
    if stmt.__class__.__name__ == "TryStar":
        return _reduced_compound(stmt, needed, as_main)
    if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
        return stmt  # how every kept statement compiles
    return stmt if _touches(stmt) & needed else None


def _reduced_block(body: list[ast.stmt], needed: set[str], as_main: bool) -> list[ast.stmt]:
    return [part for stmt in body if (part := _reduced(stmt, needed, as_main)) is not None]


def _reduced_compound(stmt: ast.stmt, needed: set[str], as_main: bool) -> ast.stmt | None:
    """A compound statement keeping only the parts that bind or change needed names (and its own header: a
    ``for``/``with`` target binds, so a loop over a needed name's building is kept whole in its header)."""
    header_binds = set()
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        header_binds = _target_names(stmt.target)
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        header_binds = {
            n for item in stmt.items if item.optional_vars for n in _target_names(item.optional_vars)
        }
    fields = {}
    kept = False
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if block is None:
            continue
        reduced = _reduced_block(block, needed, as_main)
        kept |= bool(reduced)
        fields[name] = reduced
    handlers = []
    for h in getattr(stmt, "handlers", []) or []:
        reduced = _reduced_block(h.body, needed, as_main)
        binds_name = h.name is not None and h.name in needed
        kept |= bool(reduced) or binds_name
        handlers.append((h, reduced))
    if not kept and not header_binds & needed:
        return None
    new = copy.copy(stmt)
    for name, reduced in fields.items():
        original = getattr(stmt, name)
        setattr(new, name, reduced or ([ast.copy_location(ast.Pass(), original[0])] if original else []))
        if name == "body" and not getattr(new, name):
            setattr(new, name, [ast.copy_location(ast.Pass(), stmt)])
    if handlers:
        new.handlers = [  # type: ignore[attr-defined]
            ast.copy_location(
                ast.ExceptHandler(type=h.type, name=h.name, body=body or [ast.copy_location(ast.Pass(), h)]),
                h,
            )
            for h, body in handlers
        ]
    return new


def _touches(stmt: ast.stmt) -> set[str]:
    """Module-level names a simple statement binds or changes."""
    out: set[str] = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.add(stmt.name)
    elif isinstance(stmt, ast.Import):
        out |= {(a.asname or a.name.split(".")[0]) for a in stmt.names}
    elif isinstance(stmt, ast.ImportFrom):
        out |= {(a.asname or a.name) for a in stmt.names if a.name != "*"}
    elif isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            out |= _target_names(target) | _changed(target)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        out |= _target_names(stmt.target) | _changed(stmt.target)
    elif isinstance(stmt, ast.Delete):
        for target in stmt.targets:
            out |= _target_names(target) | _changed(target)
    elif isinstance(stmt, ast.Expr):
        call = stmt.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
            out |= _changed(call.func)  # CONFIGS.append(...), registry.update(...)
    for node in ast.walk(stmt):  # a walrus at module level binds too
        if isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def _target_names(target: ast.expr) -> set[str]:
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {n for e in target.elts for n in _target_names(e)}
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return set()


def _changed(target: ast.expr) -> set[str]:
    """The name whose object an assignment into ``target`` (``X[k]``, ``X.a``, ``X.a[k]``) changes."""
    node = target
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return {node.id} if isinstance(node, ast.Name) and node is not target else set()


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


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None) or []
    return min([d.lineno for d in decorators] + [stmt.lineno])


class _Reads:
    """Module-level names a statement reads, its nested scopes' reads of module names included (symtable)."""

    def __init__(self, source: str) -> None:
        try:
            self._tables = symtable.symtable(source, "<slice>", "exec").get_children()
        except SyntaxError:
            self._tables = []

    def of(self, stmt: ast.stmt) -> set[str]:
        names = _module_scope_loads(stmt)
        first, last = _first_line(stmt), stmt.end_lineno or stmt.lineno
        for table in self._tables:
            if first <= table.get_lineno() <= last:
                names |= _global_reads(table)
        return names


def _global_reads(table: symtable.SymbolTable) -> set[str]:
    """Names ``table`` (a function, lambda, class or comprehension scope) and the scopes inside it read from
    the module: referenced and neither local nor free (a class body's unassigned names are module names too)."""
    out = {
        s.get_name()
        for s in table.get_symbols()
        if s.is_referenced()
        and (s.is_global() or (table.get_type() == "class" and not s.is_assigned()))
        and not s.is_free()
    }
    for child in table.get_children():
        out |= _global_reads(child)
    return out


def _module_scope_loads(stmt: ast.stmt) -> set[str]:
    """Names loaded by ``stmt``'s module-scope expressions: not inside a function, lambda or class body (their
    reads come from symtable), and not a comprehension's own variables."""
    out: set[str] = set()

    def visit(node: ast.AST, local: frozenset[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for d in node.decorator_list:
                visit(d, local)
            if isinstance(node, ast.ClassDef):
                for b in (*node.bases, *(k.value for k in node.keywords)):
                    visit(b, local)
            else:
                a = node.args
                for d in (*a.defaults, *(d for d in a.kw_defaults if d is not None)):
                    visit(d, local)
                for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                    if arg is not None and arg.annotation is not None:
                        visit(arg.annotation, local)
                if node.returns is not None:
                    visit(node.returns, local)
            return
        if isinstance(node, ast.Lambda):
            a = node.args
            for d in (*a.defaults, *(d for d in a.kw_defaults if d is not None)):
                visit(d, local)
            return
        if isinstance(node, _COMPREHENSIONS):
            inner = set(local)
            for gen in node.generators:
                visit(gen.iter, frozenset(inner))
                inner |= _target_names(gen.target)
                for cond in gen.ifs:
                    visit(cond, frozenset(inner))
            elts = (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,)
            for e in elts:
                visit(e, frozenset(inner))
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            out.add(node.id)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)  # X += ... reads X
        for child in ast.iter_child_nodes(node):
            visit(child, local)

    visit(stmt, frozenset())
    return out
