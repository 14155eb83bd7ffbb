"""The one patch module: every change to Triton's objects or the user's goes back as a unit, also on error."""

from __future__ import annotations

import os
import types

import pytest
from triton import knobs

from tests import kernels
from tilelens.core import compat
from tilelens.core import patches as interpreter
from tilelens.core.patches import (
    TuningMirror,
    _Patcher,
    attribute_replaced,
    compiled_mode,
    jit_registry_kept,
    rewire_chain,
    shadow_jit,
)


def test_patcher_restores_the_first_value_and_deletes_what_it_added() -> None:
    owner = types.SimpleNamespace(a=1)
    patcher = _Patcher()
    for value in range(5):
        patcher.set(owner, "a", value)
        patcher.set(owner, "b", value)
    assert len(patcher._saved) == 2  # one entry per attribute, however often it is set
    patcher.restore()
    assert vars(owner) == {"a": 1}


def test_patcher_restores_everything_when_one_restore_fails() -> None:
    class Stubborn:
        def __setattr__(self, name: str, value: object) -> None:
            if name == "x" and value == "old":
                raise RuntimeError("cannot go back")
            object.__setattr__(self, name, value)

    first, stubborn, last = types.SimpleNamespace(v=0), Stubborn(), types.SimpleNamespace(v=0)
    object.__setattr__(stubborn, "x", "old")
    globals_like = {"k": "old"}
    patcher = _Patcher()
    patcher.set(first, "v", 1)
    patcher.set(stubborn, "x", "new")
    patcher.set_item(globals_like, "k", "new")
    patcher.set(last, "v", 1)
    with pytest.raises(RuntimeError, match="cannot go back"):
        patcher.restore()
    assert (first.v, last.v, globals_like) == (0, 0, {"k": "old"})
    assert patcher._saved == [] and patcher._seen == set()


def test_registry_entries_survive_constructions() -> None:
    if compat.jit_registry is None:
        pytest.skip("this Triton keeps no JIT registry")
    pyfn = kernels.add_kernel.fn
    key = f"{pyfn.__module__}:{pyfn.__qualname__}"
    before = compat.jit_registry.get(key)
    shadow = shadow_jit(pyfn)
    assert isinstance(shadow, compat.JITFunction) and shadow is not before
    assert compat.jit_registry.get(key) is before
    with pytest.raises(ZeroDivisionError), jit_registry_kept(pyfn):
        compat.JITFunction(pyfn)
        assert compat.jit_registry[key] is not before
        raise ZeroDivisionError
    assert compat.jit_registry.get(key) is before


def test_compiled_mode_puts_the_knob_and_its_variable_back() -> None:
    with knobs.runtime.scope():
        knobs.runtime.interpret = True
        with pytest.raises(ZeroDivisionError), compiled_mode():
            assert knobs.runtime.interpret is False
            raise ZeroDivisionError
        assert knobs.runtime.interpret is True and os.environ.get("TRITON_INTERPRET") in ("1", "true", "True")


def test_pre_run_hooks_go_back_on_error() -> None:
    fn = interpreter.make_interpreted(kernels.add_kernel.fn)
    own = list(fn.pre_run_hooks)
    with pytest.raises(ZeroDivisionError), attribute_replaced(fn, "pre_run_hooks", [print]):
        assert fn.pre_run_hooks == [print]
        raise ZeroDivisionError
    assert fn.pre_run_hooks == own and "pre_run_hooks" in vars(fn)


def test_rewiring_is_all_or_nothing() -> None:
    kernel = kernels.make_autotuned()
    user, heuristics = dict(vars(kernel)), dict(vars(kernel.fn))

    def broken_bench() -> object:
        raise RuntimeError("no benchmarker")

    layers = [kernel, kernel.fn]
    with pytest.raises(RuntimeError, match="no benchmarker"):
        rewire_chain(layers, object(), in_place=True, bench=broken_bench, tuner_run=lambda t: t.run)
    assert vars(kernel) == user and vars(kernel.fn) == heuristics

    leaf = object()
    copies = rewire_chain(layers, leaf, in_place=False, bench=object, tuner_run=lambda t: print)
    assert vars(kernel) == user and vars(kernel.fn) == heuristics  # copies: the user's layers untouched
    assert copies[0] is not kernel and copies[0].fn is copies[1] and copies[1].fn is leaf
    assert copies[0].cache is not kernel.cache and copies[0].cache_results is False and copies[0].run is print
    assert copies[0]._tilelens_trace is leaf and copies[1]._tilelens_trace is leaf


def test_tuning_mirror_shows_then_restores() -> None:
    user = kernels.make_autotuned()
    copied = rewire_chain([user], object(), in_place=False, bench=object, tuner_run=lambda t: t.run)[0]
    before = dict(vars(user))
    mirror = TuningMirror()
    for choice in ("first", "second"):
        copied.best_config = choice
        mirror.show([user], [copied])
        assert user.best_config == choice
    mirror.show([user, user.fn], [copied, user.fn])  # the same object on both sides: nothing to show
    mirror.restore()
    assert vars(user) == before
