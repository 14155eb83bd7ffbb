"""The package's shape, checked from its source so that the layering survives every change.

Data flows capture (``core``) -> ``records`` -> ``store`` -> (query | ``replay``), and the command line
(``cli``, ``commands``) is a face over ``tilelens.api``. What counts as an import here: every ``import`` and
``from ... import`` statement in a module, at its top level or inside a function (a lazy import still runs),
and, for the layering rules, also those under ``if TYPE_CHECKING:``. ``from pkg import name`` imports the
module ``pkg.name`` when there is one, else ``pkg`` itself. Not imports: the names ``tilelens``,
``tilelens.api`` and ``tilelens.store`` load on attribute access (PEP 562, ``importlib.import_module`` of a
string), which runs only after every module involved has finished importing; and the implicit import of a
module's own parent package.
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
PATCH_MODULE = "tilelens.core.interpreter"
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
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
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


def test_the_scanner_sees_every_kind_of_import() -> None:
    kinds = {(i.target, i.typing_only) for i in imports_of("tilelens.commands.show")}
    assert ("tilelens.api", False) in kinds and ("tilelens.api", True) in kinds  # top level; TYPE_CHECKING
    lazy = {i.target for i in imports_of("tilelens.store.query")}
    assert "tilelens.store.lanes" in lazy  # imported inside methods only
    assert len(modules()) > 40 and "tilelens.store" in modules() and "tilelens" in modules()


def test_only_the_store_talks_to_databases() -> None:
    outside = [m for m in modules() if not _under(m, "tilelens.store")]
    assert "tilelens.config" in outside and "tilelens.store.history" not in outside
    assert _offenders(outside, ("sqlalchemy", "sqlite3", "alembic", "psycopg")) == []
    assert _offenders(_within("tilelens.store"), ("sqlalchemy", "sqlite3", "alembic"))  # and it does


def test_core_store_and_replay_never_import_the_face() -> None:
    lower = _within(
        "tilelens.core", "tilelens.store", "tilelens.replay", "tilelens.records", "tilelens.errors"
    )
    assert _offenders(lower, ("tilelens.cli", "tilelens.commands", "tilelens.api")) == []


def test_the_store_knows_nothing_of_capture_replay_or_triton() -> None:
    assert _offenders(_within("tilelens.store"), ("tilelens.core", "tilelens.replay", "triton")) == []


def test_the_face_goes_through_the_api() -> None:
    face = _within("tilelens.cli", "tilelens.commands")
    assert _offenders(face, ("tilelens.core", "tilelens.store", "tilelens.replay")) == []
    assert _offenders(face, ("tilelens.api",))  # and it does


def test_no_import_cycles() -> None:
    """Among the package's modules, counting lazy imports too (they run, later), but not TYPE_CHECKING ones."""
    graph = {
        m: sorted({i.target for i in imports_of(m) if not i.typing_only and i.target in modules()} - {m})
        for m in modules()
    }
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                walk(nxt)
        path.pop()
        state[node] = 2

    for module in graph:
        if module not in state:
            walk(module)
    assert cycles == []


def test_modules_stay_small() -> None:
    sizes = {m: len(p.read_text().splitlines()) for m, p in modules().items()}
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}


# -- one patch module ---------------------------------------------------------------------------------------


@cache
def triton_attributes() -> frozenset[str]:
    """Every attribute name of the Triton objects TileLens handles: classes, and live instances of them."""
    from tests import kernels
    from tilelens.core import compat, interpreter

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
    (
        "tilelens.core.semantics",
        "setattr(module, name, _interpreted_extern(value))",
    ): "a module TileLens made",
    ("tilelens.runner", "main.__dict__.update("): "the fresh __main__ module the runner makes for a script",
    ("tilelens.store.lanes", 'setattr(out[int(v)], f"{kind}_lanes"'): "the store's own LineCounts",
    ("tilelens.cli", "st.db, st.blobs, st.debug = db, blobs, debug"): "the CLI's own state",
    ("tilelens.cli", "setattr(st, param.name, value)"): "the CLI's own state",
    (
        "tilelens.core.frontend",
        "shape.values = list(entry[1])",
    ): "the tl.tuple the tensor constructor just made",
    ("tilelens.core.frontend", "shape.type = entry[2]"): "the tl.tuple the tensor constructor just made",
    ("tilelens.core.thread_state", "super().__setattr__(name, value)"): "TileLens's own thread-local state",
    ("tilelens.core.thread_state", "super().__delattr__(name)"): "TileLens's own thread-local state",
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
