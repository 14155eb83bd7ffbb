"""The checks replay makes before running a kernel's code, and the reduced loading of scripts (issue 12, 4-5)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from tilelens.core import compat
from tilelens.core.kernel.identity import kernel_identity
from tilelens.core.patches import shadow_jit
from tilelens.replay import trust
from tilelens.replay.resolve import innermost

ROOT = Path(__file__).resolve().parents[2]


def _kernels(module: ModuleType) -> list[object]:
    found = []
    for name, obj in vars(module).items():
        try:
            fn = innermost(obj, name)
        except Exception:
            continue
        if getattr(fn, "fn", None) is not None and fn.fn.__module__ == module.__name__:
            found.append(fn)
    return found


def _modules() -> list[ModuleType]:
    names = ["tests.kernels", "tests.tutorial_kernels", "tests.semantic_kernels", "tests.gluon_kernels"]
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        names += ["vector_add", "softmax", "autotuned_matmul", "heuristics_scale", "oob_bug"]
        modules = [importlib.import_module(n) for n in names]
    finally:
        sys.path.remove(str(ROOT / "examples"))
    try:
        ops = importlib.import_module("liger_kernel.ops")
    except ImportError:  # the dev extra installs it; the other kernels are still checked without it
        return modules
    for info in pkgutil.walk_packages(ops.__path__, "liger_kernel.ops."):
        try:
            modules.append(importlib.import_module(info.name))
        except Exception:  # backends for hardware or packages this machine does not have
            continue
    return modules


def test_static_kernel_source_is_the_one_triton_hashes_for_every_known_kernel() -> None:
    """The check made before a file runs must agree with Triton's own source, or honest replays are refused."""
    checked = 0
    for module in _modules():
        for fn in _kernels(module):
            ident = kernel_identity(fn if isinstance(fn, compat.JITFunction) else shadow_jit(fn.fn))
            kfile = trust.read_kernel_file(Path(ident.file), ident.qualname)
            assert kfile.kernel_defs(), ident.name
            assert kfile.kernel_sha256(ident.source_sha256) == ident.source_sha256, ident.name
            trust.check_stored_source(ident.source, ident.source_sha256, ident.qualname, ident.def_line)
            checked += 1
    assert checked >= 45


def test_definitions_are_found_inside_blocks_and_classes_but_not_in_functions() -> None:
    tree = ast.parse(
        textwrap.dedent(
            """
            import triton
            with scope():
                @triton.jit
                def k(x): pass
            class C:
                if True:
                    @jit
                    def k(x): pass
            def outer():
                def k(x): pass
            try:
                def k(x): pass
            except ImportError:
                @triton.autotune(configs=[], key=[])
                @triton.jit
                def k(x): pass
            """
        )
    )
    assert [d.lineno for d in trust.find_defs(tree, "k")] == [5, 13, 17]
    assert [d.lineno for d in trust.find_defs(tree, "C.k")] == [9]
    assert trust.find_defs(tree, "outer.<locals>.k") == []
    assert [trust.is_kernel_def(d) for d in trust.find_defs(tree, "k")] == [True, False, True]


def test_locating_a_module_executes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran.txt"
    pkg = tmp_path / "trustpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (pkg / "sub.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert trust.locate_module("trustpkg.sub") == pkg / "sub.py"
    assert trust.locate_module("trustpkg") == pkg / "__init__.py"
    assert not marker.exists() and "trustpkg" not in sys.modules
    assert trust.locate_module("trustpkg.missing") is None
    for name in ("__main__", "sys", "os;rm", "", "a..b"):
        assert trust.locate_module(name) is None, name
    this = trust.locate_module("this")
    assert this is not None and this.name == "this.py"


@pytest.mark.parametrize("path", ["relative.py", "<string>", ""])
def test_paths_that_are_not_absolute_files_are_refused(path: str) -> None:
    with pytest.raises(trust.UntrustedCode):
        trust.recorded_path(path, ())


def test_files_in_data_folders_are_refused(tmp_path: Path) -> None:
    for folder in (tmp_path / ".tilelens", tmp_path / "blobs" / "ab"):
        folder.mkdir(parents=True)
        (folder / "k.py").write_text("x = 1\n")
    with pytest.raises(trust.UntrustedCode, match="holds history data"):
        trust.recorded_path(str(tmp_path / ".tilelens" / "k.py"), ())
    with pytest.raises(trust.UntrustedCode, match="holds history data"):
        trust.recorded_path(str(tmp_path / "blobs" / "ab" / "k.py"), (tmp_path / "blobs",))
    (tmp_path / "k.txt").write_text("x = 1\n")
    with pytest.raises(trust.UntrustedCode, match="not a Python source file"):
        trust.recorded_path(str(tmp_path / "k.txt"), ())


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def k(x):\n    pass\n", None),
        ("def k(x, B: tl.constexpr = 128, d=tl.float32, s='a', n=-1):\n    pass\n", None),
        ("import os\ndef k(x):\n    pass\n", "not just the definition"),
        ("def k(x):\n    pass\nk = 1\n", "not just the definition"),
        ("def other(x):\n    pass\n", "not just the definition"),
        ("@deco\ndef k(x):\n    pass\n", "would run code"),
        ("def k(x=print('hi')):\n    pass\n", "would run code"),
        ("def k(x: print('hi')):\n    pass\n", "would run code"),
        ("def k(x) -> print('hi'):\n    pass\n", "would run code"),
        ("def k(*, x=[i for i in range(3)]):\n    pass\n", "would run code"),
        ("def k(x:\n", "not valid Python"),
    ],
)
def test_stored_source_must_be_one_plain_definition(source: str, message: str | None) -> None:
    sha = trust.source_sha256(source)
    if message is None:
        trust.check_stored_source(source, sha, "C.k", 10)
        return
    with pytest.raises(trust.UntrustedCode, match=message):
        trust.check_stored_source(source, sha, "C.k", 10)


def test_stored_source_with_another_hash_or_line_is_refused() -> None:
    source = "def k(x):\n    pass\n"
    with pytest.raises(trust.UntrustedCode, match="does not hash"):
        trust.check_stored_source(source, "0" * 64, "k", 1)
    with pytest.raises(trust.UntrustedCode, match="out of range"):
        trust.check_stored_source(source, trust.source_sha256(source), "k", 10**9)
