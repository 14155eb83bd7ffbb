"""The package's shape, checked from its source so that the layering survives every change.

Data flows capture (``core``) -> ``records`` -> ``store`` -> (query | ``replay``), and the command line
(``cli``, ``commands``) is a face over ``tilelens.api``. Inside ``core``: kernel <- engine <- patches <-
{interpreted | compiled} <- recording (each layer imports only those to its left; interpreted and compiled never
each other; only compiled imports native). Inside ``store``: files <- sql <- {write | read} <- admin (read never
imports write). ``analysis`` reads through ``store.read`` and ``store.files`` only. What counts as an import
here: every ``import`` and ``from ... import`` statement in a module, at its top level or inside a function (a
lazy import still runs), those under ``if TYPE_CHECKING:``, and a module
named by a string that ``importlib.import_module`` is given or that a name table of lazy exports maps to (PEP
562: ``tilelens``, ``tilelens.api``, ``tilelens.store``). ``from pkg import name`` imports the module
``pkg.name`` when there is one, else ``pkg`` itself. Not an import: the implicit import of a module's own parent
package. Each rule is shown failing on a planted violation (``test_each_rule_catches_a_planted_violation``).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tilelens"
PATCH_MODULE = "tilelens.core.patches"
MAX_LINES = 650  # "no module over ~600 lines"


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # what it imports (dotted)
    line: int
    typing_only: bool  # under `if TYPE_CHECKING:`: never executed


@cache
def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


@cache
def imports_of(module: str) -> tuple[Import, ...]:
    path = modules()[module]
    return scan_imports(module, path.read_text(), path.name == "__init__.py")


def _named_modules(node: ast.AST) -> list[str]:
    """Modules a statement names by string: ``importlib.import_module("m")``, or the values of a module-level
    table of lazy exports (a dict of name -> module, the form ``tilelens.api`` and ``tilelens.store`` use)."""
    names: list[str] = []
    if isinstance(node, ast.Call):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called == "import_module" and node.args and isinstance(node.args[0], ast.Constant):
            names.append(str(node.args[0].value))
    elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
        values = [
            v.value for v in node.value.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        ]
        if values and len(values) == len(node.value.values):
            names += [v for v in values if v.startswith("tilelens.") and v in modules()]
    return [n for n in names if n in modules()]


def scan_imports(module: str, text: str, is_package: bool = False) -> tuple[Import, ...]:
    tree = ast.parse(text)
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(module, alias.name, node.lineno, typing_only) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                target = candidate if candidate in modules() else base
                found.append(Import(module, target, node.lineno, typing_only))
        found.extend(Import(module, n, getattr(node, "lineno", 0), typing_only) for n in _named_modules(node))
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(tree, False)
    return tuple(found)


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _within(*packages: str) -> list[str]:
    """The modules of ``packages`` and every module under them."""
    return [m for m in modules() if _under(m, *packages)]


def _offenders(importers: Iterable[str], targets: tuple[str, ...]) -> list[str]:
    """Each import, by one of the modules ``importers``, of ``targets`` or a module under them."""
    return [
        f"{i.module}:{i.line} imports {i.target}"
        for m in importers
        for i in imports_of(m)
        if _under(i.target, *targets)
    ]


def all_imports() -> list[Import]:
    return [i for m in modules() for i in imports_of(m)]


def test_the_scanner_sees_every_kind_of_import() -> None:
    kinds = {(i.target, i.typing_only) for i in imports_of("tilelens.commands.show")}
    assert ("tilelens.api", False) in kinds and ("tilelens.api", True) in kinds  # top level; TYPE_CHECKING
    lazy = {i.target for i in imports_of("tilelens.store.read.query")}
    assert "tilelens.store.files.lanes" in lazy  # imported inside methods only
    named = {i.target for i in imports_of("tilelens.api")}
    assert "tilelens.core.recording.recording" in named  # a lazy export's home, named by string
    assert len(modules()) > 40 and "tilelens.store" in modules() and "tilelens" in modules()


# -- layers -------------------------------------------------------------------------------------------------

# Left to right; a module may import its own layer and those to its left. Layers of one rank are siblings,
# which never import each other.
CORE_LAYERS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (0, "floor", ("tilelens.core.compat", "tilelens.core.session")),
    (1, "kernel", ("tilelens.core.kernel",)),
    (2, "engine", ("tilelens.core.engine",)),
    (3, "patches", ("tilelens.core.patches",)),
    (3, "native", ("tilelens.core.native",)),
    (4, "interpreted", ("tilelens.core.interpreted", "tilelens.core.trace")),
    (4, "compiled", ("tilelens.core.compiled",)),
    (5, "recording", ("tilelens.core.recording",)),
)
STORE_LAYERS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (0, "files", ("tilelens.store.files",)),
    (1, "sql", ("tilelens.store.sql",)),
    (2, "write", ("tilelens.store.write",)),
    (2, "read", ("tilelens.store.read",)),
    (3, "admin", ("tilelens.store.admin",)),
    (4, "the store's face", ("tilelens.store",)),  # the package's lazy exports: imported by no store module
)


def _layer(module: str, layers: tuple[tuple[int, str, tuple[str, ...]], ...]) -> tuple[int, str] | None:
    found = [(rank, name, p) for rank, name, prefixes in layers for p in prefixes if _under(module, p)]
    if not found:
        return None
    rank, name, _ = max(found, key=lambda f: len(f[2]))  # the most specific prefix
    return rank, name


def layer_violations(
    edges: Iterable[Import], layers: tuple[tuple[int, str, tuple[str, ...]], ...]
) -> list[str]:
    """Imports (type-only ones too) of a layer to the right, or of a sibling layer."""
    out = []
    for i in edges:
        here, there = _layer(i.module, layers), _layer(i.target, layers)
        if here is None or there is None or here == there:
            continue
        if there[0] > here[0] or (there[0] == here[0] and there[1] != here[1]):
            out.append(f"{i.module}:{i.line} ({here[1]}) imports {i.target} ({there[1]})")
    return out


def native_violations(edges: Iterable[Import]) -> list[str]:
    """Inside ``core``, only ``core.compiled`` imports ``core.native`` (above core, ``tilelens doctor`` may ask
    it what it would choose)."""
    return [
        f"{i.module}:{i.line} imports {i.target}"
        for i in edges
        if _under(i.target, "tilelens.core.native")
        and _under(i.module, "tilelens.core")
        and not _under(i.module, "tilelens.core.compiled", "tilelens.core.native")
    ]


def test_core_is_layered() -> None:
    assert layer_violations(all_imports(), CORE_LAYERS) == []
    assert native_violations(all_imports()) == []


def test_the_store_is_tiered() -> None:
    assert layer_violations(all_imports(), STORE_LAYERS) == []


def test_core_and_store_top_levels_stay_small() -> None:
    """A newcomer finds their room: at most ~10 modules at core's top level and ~8 at the store's."""
    top = {
        name: sorted(
            p.name for p in (PACKAGE / name).iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()
        )
        for name in ("core", "store")
    }
    assert len(top["core"]) <= 11 and len(top["store"]) <= 8, top


def test_only_the_store_talks_to_databases() -> None:
    outside = [m for m in modules() if not _under(m, "tilelens.store")]
    assert "tilelens.config" in outside and "tilelens.store.write.history" not in outside
    assert _offenders(outside, ("sqlalchemy", "sqlite3", "alembic", "psycopg")) == []
    assert _offenders(_within("tilelens.store"), ("sqlalchemy", "sqlite3", "alembic"))  # and it does
    assert _offenders(_within("tilelens.store.files"), ("sqlalchemy", "sqlite3", "alembic", "psycopg")) == []


def test_core_store_and_replay_never_import_the_face() -> None:
    lower = _within(
        "tilelens.core", "tilelens.store", "tilelens.replay", "tilelens.records", "tilelens.errors"
    )
    assert _offenders(lower, ("tilelens.cli", "tilelens.commands", "tilelens.api")) == []


def test_the_store_knows_nothing_of_capture_replay_or_triton() -> None:
    assert _offenders(_within("tilelens.store"), ("tilelens.core", "tilelens.replay", "triton")) == []


def test_the_repro_script_stands_alone() -> None:
    """``repro.py`` (``tilelens.replay.repro_script``, copied as it is by ``tilelens repro``) runs where TileLens
    is not installed: it imports nothing of TileLens, and only the standard library, torch, Triton and numpy."""
    imported = {i.target.split(".")[0] for i in imports_of("tilelens.replay.repro_script")}
    assert imported <= set(sys.stdlib_module_names) | {"torch", "triton", "numpy", "__future__"}, imported


# An analysis reads histories through the store's read side (and its files), as any reader does: it needs
# neither capture, replay, a writer nor the command line, and nothing below it needs an analysis.
ANALYSIS = "tilelens.analysis"
ANALYSIS_MAY_NOT_IMPORT = (
    "tilelens.core",
    "tilelens.replay",
    "tilelens.store.write",
    "tilelens.store.admin",
    "tilelens.store.sql",
    "tilelens.cli",
    "tilelens.commands",
    "tilelens.api",
    "tilelens.reporters",
    "tilelens.web",
    "torch",
    "triton",
    "sqlalchemy",
    "alembic",
)


def analysis_violations(edges: Iterable[Import]) -> list[str]:
    """Imports by ``tilelens.analysis`` of what it may not use, and imports of it by core, store or replay."""
    below = ("tilelens.core", "tilelens.store", "tilelens.replay")
    return [
        f"{i.module}:{i.line} imports {i.target}"
        for i in edges
        if (_under(i.module, ANALYSIS) and _under(i.target, *ANALYSIS_MAY_NOT_IMPORT))
        or (_under(i.target, ANALYSIS) and _under(i.module, *below))
    ]


def test_analyses_read_through_the_store() -> None:
    assert analysis_violations(all_imports()) == []
    assert _offenders(_within(ANALYSIS), ("tilelens.store.read",))  # and they do


def test_the_face_goes_through_the_api() -> None:
    face = _within("tilelens.cli", "tilelens.commands")
    assert _offenders(face, ("tilelens.core", "tilelens.store", "tilelens.replay")) == []
    assert _offenders(face, ("tilelens.api",))  # and it does


def import_cycles(edges: Iterable[Import]) -> list[str]:
    """Every cycle among the package's modules, over every kind of import (lazy, type-only, by string)."""
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    for i in edges:
        if i.target in graph and i.target != i.module:
            graph.setdefault(i.module, set()).add(i.target)
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                walk(nxt)
        path.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module)
    return cycles


def test_no_import_cycles() -> None:
    assert import_cycles(all_imports()) == []


# -- private names ------------------------------------------------------------------------------------------

# The seed's names: ``tilelens.core.trace`` re-exports the interpreted layer's ``_InterpretedLeaf``.
SEED_REEXPORTS = {("tilelens.core.trace", "_InterpretedLeaf")}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@cache
def private_definitions() -> dict[str, frozenset[str]]:
    """Per module, the private names it defines: functions, classes, and attributes it assigns (on ``self``,
    ``cls``, at module or class level)."""
    out = {}
    for module, path in modules().items():
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(
                node.name
            ):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and _private(node.id):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and _private(node.target.id)
            ):
                names.add(node.target.id)
        out[module] = frozenset(names)
    return out


@cache
def triton_private_names() -> frozenset[str]:
    """Private names Triton's own source defines: reaching those is ``compat``'s business, not this rule's."""
    import triton

    names: set[str] = set()
    for path in Path(triton.__file__).parent.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(
                node.name
            ):
                names.add(node.name)
            elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
                name = node.id if isinstance(node, ast.Name) else node.attr
                if _private(name):
                    names.add(name)
    return frozenset(names)


def private_uses(module: str, text: str) -> list[str]:
    """Where ``module`` reaches another TileLens module's private name: ``from m import _x``, or ``obj._x``
    (``obj`` not ``self``/``cls``) where ``_x`` is a private name some other TileLens module defines and this one
    does not. Foreign private names (Triton's, CPython's) are not TileLens's and not counted."""
    defined = private_definitions()
    own = defined.get(module, frozenset())
    others = (
        set().union(*(names for m, names in defined.items() if m != module)) - own - triton_private_names()
    )
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tilelens"):
            for alias in node.names:
                if _private(alias.name) and (module, alias.name) not in SEED_REEXPORTS:
                    out.append(f"{module}:{node.lineno} imports {node.module}.{alias.name}")
        elif (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and node.attr in others
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            out.append(f"{module}:{node.lineno} uses {ast.unparse(node)}")
    return out


def test_no_module_uses_another_modules_private_names() -> None:
    assert [use for m, p in modules().items() for use in private_uses(m, p.read_text())] == []


def test_each_rule_catches_a_planted_violation() -> None:
    """Each rule above, given one planted import or use, reports exactly it (the real tree has none)."""

    def planted(module: str, target: str, typing_only: bool = False) -> list[Import]:
        return [*all_imports(), Import(module, target, 1, typing_only)]

    engine, patches = "tilelens.core.engine.access", "tilelens.core.patches"
    assert layer_violations(planted(engine, patches, typing_only=True), CORE_LAYERS) == [
        f"{engine}:1 (engine) imports {patches} (patches)"
    ]
    kernel = "tilelens.core.kernel.arguments"
    assert layer_violations(planted(kernel, engine), CORE_LAYERS) == [
        f"{kernel}:1 (kernel) imports {engine} (engine)"
    ]
    interpreted, compiled = "tilelens.core.interpreted.launch", "tilelens.core.compiled.router"
    assert layer_violations(planted(compiled, interpreted), CORE_LAYERS) == [
        f"{compiled}:1 (compiled) imports {interpreted} (interpreted)"
    ]
    recording = "tilelens.core.recording.recording"
    assert layer_violations(planted(compiled, recording), CORE_LAYERS) == [
        f"{compiled}:1 (compiled) imports {recording} (recording)"
    ]
    assert native_violations(planted(interpreted, "tilelens.core.native")) == [
        f"{interpreted}:1 imports tilelens.core.native"
    ]
    read, write = "tilelens.store.read.query", "tilelens.store.write.history"
    assert layer_violations(planted(read, write), STORE_LAYERS) == [
        f"{read}:1 (read) imports {write} (write)"
    ]
    files, sql = "tilelens.store.files.blobs", "tilelens.store.sql.database"
    assert layer_violations(planted(files, sql), STORE_LAYERS) == [f"{files}:1 (files) imports {sql} (sql)"]
    admin = "tilelens.store.admin.gc"
    assert layer_violations(planted(write, admin), STORE_LAYERS) == [
        f"{write}:1 (write) imports {admin} (admin)"
    ]
    check = "tilelens.analysis.check"
    assert analysis_violations(planted(check, write, typing_only=True)) == [f"{check}:1 imports {write}"]
    assert analysis_violations(planted(check, "triton.language")) == [f"{check}:1 imports triton.language"]
    assert analysis_violations(planted(read, check)) == [f"{read}:1 imports {check}"]
    # A circle through an import named by string (importlib), and one through a type-only import.
    text = 'import importlib\nimportlib.import_module("tilelens.core.recording.recording")\n'
    by_name = [i for i in scan_imports("tilelens.core.recording.children", text) if i.target != "importlib"]
    assert by_name == [Import("tilelens.core.recording.children", recording, 2, False)]
    assert import_cycles([*all_imports(), *by_name]) == [
        f"{recording} -> tilelens.core.recording.children -> {recording}"
    ]
    assert import_cycles(planted("tilelens.core.kernel.spans", kernel, typing_only=True)) == [
        f"tilelens.core.kernel.spans -> {kernel} -> tilelens.core.kernel.spans"
    ]
    # Another module's private names: imported, or reached on an object.
    assert private_uses("tilelens.x", "from tilelens.core.patches import _Patcher\n") == [
        "tilelens.x:1 imports tilelens.core.patches._Patcher"
    ]
    assert private_uses("tilelens.x", "def f(history):\n    return history._next_seq\n") == [
        "tilelens.x:2 uses history._next_seq"
    ]
    assert private_uses("tilelens.x", "def f(grid):\n    return grid._init_args_hst\n") == []  # Triton's


def test_modules_stay_small() -> None:
    sizes = {m: len(p.read_text().splitlines()) for m, p in modules().items()}
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}


# -- one patch module ---------------------------------------------------------------------------------------


@cache
def triton_attributes() -> frozenset[str]:
    """Every attribute name of the Triton objects TileLens handles: classes, and live instances of them."""
    from tests import kernels
    from tilelens.core import compat
    from tilelens.core import patches as interpreter

    autotuner = kernels.make_autotuned()
    objects = [
        compat.JITFunction,
        compat.InterpretedFunction,
        compat.Autotuner,
        compat.Heuristics,
        compat.KernelInterface,
        compat.InterpreterBuilder,
        autotuner,
        autotuner.fn,
        autotuner.fn.fn,
        interpreter.make_interpreted(kernels.add_kernel.fn),
    ]
    names = {name for obj in objects for name in dir(obj)}
    names |= {name for obj in objects if not isinstance(obj, type) for name in vars(obj)}
    names |= set(dir(compat.knobs.runtime)) | {"interpret"} | set(interpreter.TUNING_STATE)
    # A function's descriptive metadata: TileLens names its own wrappers; not behaviour of anything Triton's.
    return frozenset(names - {"__name__", "__qualname__", "__module__", "__doc__", "__wrapped__"})


# Changes TileLens makes outside the patch module to objects that are its own, with the reason.
OWN_OBJECTS = {
    ("tilelens.replay.slicing", "setattr(new, name, reduced or"): "a copy of an AST node the slicer made",
    (
        "tilelens.replay.slicing",
        "setattr(new, name, [ast.copy_location",
    ): "a copy of an AST node the slicer made",
    (
        "tilelens.core.engine.semantics",
        "setattr(module, name, _interpreted_extern(value))",
    ): "a module TileLens made",
    ("tilelens.runner", "main.__dict__.update("): "the fresh __main__ module the runner makes for a script",
    ("tilelens.store.files.lanes", 'setattr(out[int(v)], f"{kind}_lanes"'): "the store's own LineCounts",
    ("tilelens.cli", "st.db, st.blobs, st.debug = db, blobs, debug"): "the CLI's own state",
    (
        "tilelens.core.engine.frontend",
        "shape.values = list(entry[1])",
    ): "the tl.tuple the tensor constructor just made",
    (
        "tilelens.core.engine.frontend",
        "shape.type = entry[2]",
    ): "the tl.tuple the tensor constructor just made",
}


def _source(node: ast.AST, text: str) -> str:
    return ast.get_source_segment(text, node) or ""


def patch_sites(module: str, text: str) -> list[str]:
    """Statements in ``text`` that change Triton's objects (or could): what only the patch module may do."""
    tree = ast.parse(text)
    attributes = triton_attributes()
    sites = []

    def note(node: ast.AST, what: str) -> None:
        line = text.splitlines()[node.lineno - 1].strip()  # type: ignore[attr-defined]
        if not any(m == module and snippet in line for m, snippet in OWN_OBJECTS):
            sites.append(f"{module}:{node.lineno}: {what}: {line}")  # type: ignore[attr-defined]

    def targets(node: ast.AST) -> list[ast.expr]:
        if isinstance(node, ast.Assign):
            found = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            found = [node.target]
        elif isinstance(node, ast.Delete):
            found = list(node.targets)
        else:
            return []
        flat = []
        while found:
            t = found.pop()
            if isinstance(t, (ast.Tuple, ast.List)):
                found.extend(t.elts)
            else:
                flat.append(t)
        return flat

    for node in ast.walk(tree):
        for t in targets(node):
            if isinstance(t, ast.Attribute) and t.attr in attributes:
                base = t.value
                if not (isinstance(base, ast.Name) and base.id in ("self", "cls")):
                    note(node, f"sets .{t.attr}")
            elif isinstance(t, ast.Subscript):
                container = _source(t.value, text)
                if "jit_registry" in container or "__dict__" in container or container.startswith("vars("):
                    note(node, f"sets an item of {container}")
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if name in ("setattr", "delattr", "__setattr__", "__delattr__", "set_interpret"):
                note(node, f"calls {name}")
            elif name in ("update", "pop", "clear", "setdefault") and isinstance(func, ast.Attribute):
                container = _source(func.value, text)
                if "jit_registry" in container or "__dict__" in container or container.startswith("vars("):
                    note(node, f"calls {container}.{name}")
    return sorted(sites, key=lambda site: int(site.split(":")[1]))


def test_the_patch_scanner_finds_patches() -> None:
    planted = textwrap.dedent(
        """
        def sneaky(kernel, layer, fn):
            kernel.best_config = None
            layer.fn, other = fn, 1
            fn.pre_run_hooks += [print]
            setattr(kernel, "cache_results", False)
            compat.set_interpret(False)
            compat.jit_registry["m:k"] = fn
            vars(kernel).pop("best_config")
            self.fn = fn  # its own attribute: fine
            record.status = "ok"  # not a name Triton's objects have: fine
        """
    )
    sites = patch_sites("tilelens.planted", planted)
    assert [s.split(": ")[1] for s in sites] == [
        "sets .best_config",
        "sets .fn",
        "sets .pre_run_hooks",
        "calls setattr",
        "calls set_interpret",
        "sets an item of compat.jit_registry",
        "calls vars(kernel).pop",
    ]


def test_every_patch_lives_in_the_patch_module() -> None:
    sites = [
        site
        for module, path in modules().items()
        if module != PATCH_MODULE
        for site in patch_sites(module, path.read_text())
    ]
    assert sites == []
    used = {
        (m, snippet)
        for m, snippet in OWN_OBJECTS
        if any(snippet in line for line in modules()[m].read_text().splitlines())
    }
    assert used == set(OWN_OBJECTS)  # no stale exceptions
    assert patch_sites(PATCH_MODULE, modules()[PATCH_MODULE].read_text())  # and the patches are there


# -- the read path stays light ------------------------------------------------------------------------------

READ_PATH = """
import json, sys
from tilelens.cli import main

db, blobs, launch = sys.argv[1:]
where = ["--db", db, "--blobs", blobs]
loaded = {}
for name, argv in {
    "ls": ["ls"],
    "ls --runs": ["ls", "--runs"],
    "show --source": ["show", launch, "--source"],
    "sql": ["sql", "SELECT count(*) FROM launch_overview"],
}.items():
    assert main([*where, *argv]) == 0, name
    loaded[name] = sorted(m for m in ("torch", "triton", "alembic", "sqlalchemy") if m in sys.modules)
print(json.dumps(loaded), file=sys.stderr)
"""


def test_read_commands_import_neither_torch_triton_alembic_nor_sqlalchemy(
    history_url: str, tmp_path: Path
) -> None:
    """On a SQLite file and on a PostgreSQL server alike (there through psycopg alone)."""
    from tests import store_helpers
    from tilelens.store import History

    db, blobs = history_url, tmp_path / "blobs"
    with History.open(str(db), blobs) as h:
        launch = h.write_launch(h.begin_run(store_helpers.run_info()), store_helpers.launch())
    proc = subprocess.run(
        [sys.executable, "-c", READ_PATH, str(db), str(blobs), str(launch)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stderr.strip().splitlines()[-1])
    assert loaded == {name: [] for name in ("ls", "ls --runs", "show --source", "sql")}


@pytest.mark.parametrize("name", ["tilelens", "tilelens.api", "tilelens.cli"])
def test_importing_the_package_api_or_cli_loads_nothing_heavy(name: str) -> None:
    code = (
        f"import sys, {name}; "
        "print(sorted(m for m in ('torch', 'triton', 'alembic', 'sqlalchemy', 'pyarrow') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr
