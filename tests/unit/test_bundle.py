"""A kernel's bundle (``tilelens.core.kernel.bundle``): what reproduces it without its file, read off the live
objects at record time, as canonical JSON."""

from __future__ import annotations

import json
from pathlib import Path

from tests import bundle_kernels
from tilelens.core.kernel.bundle import kernel_bundle


def test_the_bundle_holds_the_kernel_its_callees_values_and_imports() -> None:
    text = kernel_bundle(bundle_kernels.bundled)
    assert text is not None and kernel_bundle(bundle_kernels.bundled) is text  # made once per kernel object
    bundle = json.loads(text)
    assert text == json.dumps(bundle, sort_keys=True, separators=(",", ":"))  # canonical: equal bytes
    assert bundle["entry"] == "tests.bundle_kernels:bundled" and bundle["unsupported"] == []
    helper, entry = bundle["units"]  # dependencies first
    assert helper["key"] == "tests.bundle_kernels:_twice" and helper["source"].startswith("def _twice(x):")
    assert entry["functions"] == {"twice_alias": "tests.bundle_kernels:_twice"}  # called under another name
    assert entry["imports"] == {"language_alias": "triton.language", "tl": "triton.language"}
    assert entry["values"] == {
        "DTYPE": {"kind": "dtype", "value": "fp32"},
        "OFFSET": {"kind": "float", "value": "0.5"},
        "SCALE": {"kind": "constexpr", "value": {"kind": "int", "value": 3}},
    }
    assert entry["source"] == bundle_kernels.bundled.src and entry["decorator"] == "triton.jit"
    lines = Path(bundle_kernels.__file__).read_text().splitlines()
    assert lines[entry["line"] - 1].startswith("def bundled(")  # the def's line, not the decorator's


def test_a_global_the_bundle_cannot_hold_is_named() -> None:
    bundle = json.loads(kernel_bundle(bundle_kernels.odd) or "")
    assert bundle["unsupported"] == ["tests.bundle_kernels:odd: UNHOLDABLE: builtins.object"]
    assert bundle["units"][0]["values"] == {}


def test_callees_made_under_triton_interpret_are_bundled_too(monkeypatch) -> None:  # noqa: ANN001
    """A script run with TRITON_INTERPRET=1 gets an ``InterpretedFunction`` from ``triton.jit``, with no ``src``
    of its own: the callee is still a unit, its source cut at ``def`` as Triton cuts it."""
    from tilelens.core import compat
    from tilelens.core.patches import shadow_jit

    interpreted = compat.InterpretedFunction(bundle_kernels._twice.fn)
    monkeypatch.setattr(bundle_kernels, "twice_alias", interpreted)
    bundle = json.loads(kernel_bundle(shadow_jit(bundle_kernels.bundled.fn)) or "")
    helper, entry = bundle["units"]
    assert helper["source"] == bundle_kernels._twice.src and bundle["unsupported"] == []
    assert entry["functions"] == {"twice_alias": "tests.bundle_kernels:_twice"}
