"""The native accessor (``tilelens/core/native/accessor.cpp``, built and loaded by ``tilelens.core.native``)
against the Python capture (``compiled_templates.capture``) on the same launches: the parity of the two paths.

Its contract: the same values, list for list; signatures equal exactly when the Python signatures are (checked
over every pair of a set of launches that differ in one kind each), with equal hashes then; the kernel's last
signature returned itself when equal; None exactly where the Python capture gives None. And the chooser: a
failed build is remembered (no retry per recording), ``TILELENS_NATIVE=0`` never builds or loads.
"""

from __future__ import annotations

import itertools
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from tilelens.core import native
from tilelens.core.compiled.router import CompiledRouter
from tilelens.core.compiled.templates import capture

from .test_compiled_capture import many_kinds
from .test_compiled_templates import _bound


def _variants() -> list[dict[str, Any]]:
    """Launches differing from the first in one argument's kind, or only in what the values carry."""
    big = torch.zeros(4, 6, 8)
    return [
        _bound(),
        _bound(x_ptr=torch.ones(40)),  # other storage: the same kind
        _bound(alias_ptr=torch.ones(50)[10:42], n=-3, scale=float("nan"), flag=False),  # values only
        _bound(x_ptr=torch.arange(40, dtype=torch.float64)),
        _bound(x_ptr=torch.arange(40, dtype=torch.int64)),
        _bound(x_ptr=torch.zeros(40, dtype=torch.bool)),
        _bound(x_ptr=torch.zeros(40, dtype=torch.complex64)),
        _bound(x_ptr=torch.arange(41, dtype=torch.float32)),
        _bound(x_ptr=torch.zeros(0)),  # empty
        _bound(x_ptr=torch.tensor(3.0)),  # 0-dimensional
        _bound(x_ptr=torch.zeros(40, device="meta")),  # another device
        _bound(x_ptr=big[1]),  # a view with an offset
        _bound(x_ptr=big.permute(2, 0, 1)),  # strides only
        _bound(x_ptr=big[:, ::2]),
        _bound(x_ptr=torch.zeros(2, 20)),
        _bound(x_ptr=torch.zeros(20, 2).t()),  # the same shape, other strides
        _bound(y_ptr=torch.zeros(5, 3, dtype=torch.bfloat16)),
        _bound(view=torch.zeros(1, dtype=torch.int32).expand(6)),  # stride 0
        _bound(n=7.0),
        _bound(n=True),
        _bound(flag=1),
        _bound(missing=3),
        _bound(missing=0.0),
        _bound(missing=torch.zeros(1)),
        _bound(BLOCK=32),
        _bound(BLOCK=16.0),  # 16 == 16.0: the type tells
        _bound(BLOCK=True, MODE="slow"),
        _bound(MODE="fast2"),
        _bound(MODE=None),
        _bound(BLOCK=2**70),  # a big int constexpr
        _bound(BLOCK=float("inf")),
        *_cuda_variants(),
    ]


def _cuda_variants() -> list[dict[str, Any]]:
    """On a GPU machine: device tensors (device pointers; the device is part of the kind)."""
    if not torch.cuda.is_available():
        return []
    x = torch.zeros(48, device="cuda")
    return [_bound(x_ptr=x[:40]), _bound(x_ptr=x[8:]), _bound(x_ptr=x[8:].view(4, 10))]


def _plan() -> Any:
    return CompiledRouter(sink=None)._kernel(many_kinds).flat_plan


def test_the_accessor_gives_the_python_values_and_equal_signatures_exactly_when_python_does(
    native_module: Any,
) -> None:
    plan = _plan()
    launches = _variants()
    python = [capture(plan, b) for b in launches]
    compiled = [native_module.capture(plan, b, None) for b in launches]
    for py, c, b in zip(python, compiled, launches):
        assert py is not None and c is not None
        assert type(c[1]) is list and len(c[1]) == len(py[1])
        assert repr(c[1]) == repr(py[1])  # repr: nan != nan
        assert [type(v) for v in c[1]] == [type(v) for v in py[1]]
        # The storage pointer is the data pointer less the offset, as torch reports them.
        t = b["x_ptr"]
        assert c[1][0] == t.storage_offset() and c[1][1] == t.untyped_storage().data_ptr()
        assert c[1][2] == t.untyped_storage().nbytes()
    pairs = 0
    for (i, a), (j, b) in itertools.product(enumerate(compiled), repeat=2):
        same = python[i][0] == python[j][0]
        assert (a[0] == b[0]) is same, (i, j)
        assert (a[0] != b[0]) is not same
        if same:
            assert hash(a[0]) == hash(b[0])
            pairs += i != j
    # 0, 1 and 2 are one kind (6 ordered pairs), and on a GPU the first two CUDA launches; every other
    # launch is a kind of its own.
    cuda = len(_cuda_variants())
    assert pairs == 6 + (2 if cuda else 0)
    assert len({c[0] for c in compiled}) == len(launches) - 2 - (1 if cuda else 0)


def test_a_dict_in_any_order_or_with_other_keys_captures_alike(native_module: Any) -> None:
    """Triton binds every parameter in order; the accessor looks each parameter up by name, so a dict in
    another order, or with another key, gives the same values and an equal signature."""
    plan = _plan()
    assert list(_bound()) == list(plan.order[0])
    for b in _variants():
        in_order = native_module.capture(plan, b, None)
        shuffled = dict(reversed(list(b.items())))
        extra = {**b, "num_warps": 4}  # an option among the parameters: not Triton's binding
        for other in (shuffled, extra):
            looked_up = native_module.capture(plan, other, None)
            assert repr(looked_up[1]) == repr(in_order[1]) == repr(capture(plan, other)[1])
            assert looked_up[0] == in_order[0]
    assert plan.order[1] == bytes(1 if name in plan.constexpr_names else 0 for name in plan.order[0])
    with pytest.raises(TypeError, match="order"):  # a plan of another shape is a programming error
        native_module.capture(types.SimpleNamespace(order=("x_ptr",)), _bound(), None)


def test_the_last_signature_is_returned_itself_when_equal(native_module: Any) -> None:
    plan = _plan()
    first = native_module.capture(plan, _bound(), None)
    x = torch.ones(40)
    again = native_module.capture(plan, _bound(n=99, x_ptr=x), first[0])
    assert again[0] is first[0]
    assert again[1][:3] == [0, x.untyped_storage().data_ptr(), 160] and again[1][12] == 99
    other = native_module.capture(plan, _bound(n=99.0), first[0])
    assert other[0] is not first[0] and other[0] != first[0]
    # A Python signature (a list) as ``last``: never equal, a new signature.
    fresh = native_module.capture(plan, _bound(), capture(plan, _bound())[0])
    assert fresh[0] == first[0] and fresh[0] is not first[0]


def test_none_exactly_where_the_python_capture_gives_none(native_module: Any) -> None:
    plan = _plan()

    class Sub(torch.Tensor):
        pass

    for changes in (
        {"x_ptr": torch.nn.Parameter(torch.zeros(40))},
        {"x_ptr": torch.zeros(40).as_subclass(Sub)},
        {"x_ptr": object()},
        {"x_ptr": "text"},
        {"MODE": object()},
        {"MODE": (1, 2)},
        {"BLOCK": torch.zeros(1)},
    ):
        bound = _bound(**changes)
        assert capture(plan, bound) is None
        assert native_module.capture(plan, bound, None) is None
    missing = _bound()
    del missing["scale"]
    assert capture(plan, missing) is None and native_module.capture(plan, missing, None) is None
    # A tensor libtorch will not describe through storage: not templated (the raw path describes it).
    sparse = torch.zeros(40).to_sparse()
    assert native_module.capture(plan, _bound(x_ptr=sparse), None) is None
    assert native_module.capture(plan, [], None) is None  # not a dict


def test_a_failed_build_is_remembered_and_native_off_loads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(native.DIR_ENV, str(tmp_path))
    fake = tmp_path / "fake-cxx"
    # A compiler that tells its version (torch's builder asks) and fails to compile.
    fake.write_text(
        '#!/bin/sh\ncase "$*" in *--version*|*-dumpversion*) echo "g++ (GCC) 12.2.0"; exit 0;; esac\n'
        "echo 'fake-cxx: no such header' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setattr(native, "_loaded", None)
    monkeypatch.setattr(native, "_load_failed", False)
    monkeypatch.setattr(native, "_background", None)
    path, text = native.build()
    assert path is None and "fake-cxx: no such header" in text
    failed = native.target().with_name(native.target().name + ".failed")
    assert "no such header" in failed.read_text()
    fake.write_text("#!/bin/sh\nexit 99\n")  # a retry would run this; a remembered failure does not
    assert native.build() == (None, failed.read_text())
    monkeypatch.setenv("TILELENS_NATIVE", "1")
    choice = native.choose()  # built? no: failed before; the Python capture, saying why
    assert choice.accessor is None and "build failed" in choice.why
    started: list[Any] = []
    monkeypatch.setattr(native.subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setenv("TILELENS_NATIVE", "auto")
    choice = native.choose()
    assert choice.accessor is None and str(failed) in choice.why and started == []  # no background retry
    failed.unlink()
    monkeypatch.setattr(native, "_background", None)
    choice = native.choose()
    assert choice.accessor is None and "background" in choice.why
    assert started and started[0][0] == [sys.executable, "-m", "tilelens.core.native", "build"]
    monkeypatch.setenv("TILELENS_NATIVE", "0")
    monkeypatch.setattr(native, "_background", None)
    started.clear()
    choice = native.choose()
    assert choice == native.Choice(None, "TILELENS_NATIVE=0: the Python capture") and started == []
    assert native.describe() == "TILELENS_NATIVE=0: the Python capture"
    assert not native.target().exists()


def test_importing_tilelens_needs_neither_torch_a_compiler_nor_fcntl() -> None:
    """The chooser's module imports without torch (``tilelens doctor`` answers fast) and without ``fcntl``
    (not every system has it): the build lock imports it only when it builds."""
    code = (
        "import sys; sys.modules['fcntl'] = None; import tilelens.core.native as n; import tilelens;"
        "print(sorted(m for m in ('torch', 'fcntl') if sys.modules.get(m)))"
    )
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


def test_a_router_chooses_its_capture_per_writer_as_tilelens_native_says(
    monkeypatch: pytest.MonkeyPatch, native_module: Any
) -> None:
    class Writer:
        def submit_flat(self, *a: Any) -> int:
            return 0

        def submit_template(self, *a: Any) -> None:
            return None

    router = CompiledRouter(sink=None)
    monkeypatch.setenv("TILELENS_NATIVE", "0")
    router.use_templates(Writer())
    assert not router.native_capture and router._capture is capture
    monkeypatch.setenv("TILELENS_NATIVE", "1")
    router.use_templates(Writer())
    assert router.native_capture and router._capture is native_module.capture
    router.use_templates(None)  # no templates: nothing to capture with
    assert not router.native_capture
