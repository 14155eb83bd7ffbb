"""The seed's test plan: traced autotuners keep the user's JITFunction reachable."""

from __future__ import annotations

import copy
import glob

import pytest
import torch
from triton import knobs

from tests import gluon_kernels, kernels
from tilelens.core import compat
from tilelens.core.interpreted.trace import trace as tilelens_trace
from tilelens.core.trace import GluonTrace, TritonTrace, _InterpretedLeaf

needs_listener = pytest.mark.skipif(
    not compat.HAS_AUTOTUNE_LISTENER, reason="knobs.autotuning.listener exists from Triton 3.8 on"
)


@pytest.fixture
def listener_calls():
    calls = []
    with knobs.autotuning.scope():
        knobs.autotuning.listener = lambda **kw: calls.append(kw)
        yield calls


def _launch(traced, n=1000):
    x = torch.randn(n)
    out = torch.empty(n)
    traced[kernels.autotuned_grid(n)](x, out, n)
    assert torch.equal(out, x * 2.0)
    return x, out


def _gluon_launch(traced, n=1000):
    x, out = _launch(traced, n)
    rec = traced.records[-1]
    assert rec.status == "ok" and rec.kernel.qualname.endswith("gluon_scale_kernel")
    # every element read once and written once, as a Triton kernel's accesses are traced
    assert (rec.summary.load_lanes, rec.summary.store_lanes) == (n, n)
    return x, out


@needs_listener
def test_autotune_listener_sees_jit_function(listener_calls):
    kernel = kernels.make_autotuned()
    jit_fn = kernel.fn.fn
    assert isinstance(jit_fn, compat.JITFunction)
    traced = TritonTrace(kernel)
    assert traced.jit_fn is jit_fn
    _launch(traced)
    assert len(listener_calls) == 1
    call = listener_calls[0]
    assert call["fn"] is jit_fn
    assert call["best_config"].kwargs == {"BLOCK": 128}
    assert call["cache_hit"] is False
    assert set(c.kwargs["BLOCK"] for c in call["configs_timings"]) == {128, 64}
    # a second launch with the same key is a cache hit: no second tuning, no second listener call
    _launch(traced)
    assert len(listener_calls) == 1


def test_traced_autotuner_sits_on_an_interpreted_leaf():
    kernel = kernels.make_autotuned()
    jit_fn = kernel.fn.fn
    TritonTrace(kernel)
    leaf = kernel.fn.fn
    assert isinstance(leaf, _InterpretedLeaf)
    assert leaf.fn is jit_fn
    assert isinstance(leaf.interpreted, compat.InterpretedFunction)
    assert leaf.arg_names == ["x_ptr", "out_ptr", "n", "BLOCK", "EVEN"]
    assert leaf.rewrite is not None  # other attributes forward to the interpreted function
    assert kernel.cache_results is False


def test_autotune_retrace_keeps_jit_function():
    kernel = kernels.make_autotuned()
    jit_fn = kernel.fn.fn
    first = TritonTrace(kernel)
    _launch(first)
    second = TritonTrace(kernel)
    assert second.jit_fn is jit_fn
    assert second.leaf is first.leaf
    _launch(second, n=512)
    rec = second.records[-1]
    assert rec.config["autotune"]["chosen"]["kwargs"] == {"BLOCK": 128}
    assert rec.config["heuristics"] == {"EVEN": True}


@needs_listener
def test_autotune_retrace_listener_still_sees_jit_function(listener_calls):
    kernel = kernels.make_autotuned()
    jit_fn = kernel.fn.fn
    TritonTrace(kernel)
    _launch(TritonTrace(kernel))
    assert [c["fn"] for c in listener_calls] == [jit_fn]


def test_autotune_interpreter_skips_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    kernel = kernels.make_autotuned(cache_results=True)
    assert kernel.cache_results is True  # decided at decoration, in compiled mode
    traced = TritonTrace(kernel)
    assert kernel.cache_results is False
    _launch(traced)
    assert glob.glob(str(tmp_path / "**" / "*.autotune.json"), recursive=True) == []
    assert len(traced.autotune_events) == 1
    event = traced.autotune_events[0]
    assert event.timings is None  # dummy timings are never kept
    assert [c["kwargs"] for c in event.configs] == [{"BLOCK": 128}, {"BLOCK": 64}]
    assert event.chosen["kwargs"] == {"BLOCK": 128}


def test_autotune_warmup_uses_a_shallow_copy():
    kernel = kernels.make_autotuned()
    traced = TritonTrace(kernel)
    x, out = torch.randn(64), torch.empty(64)
    assert traced.warmup(x, out, 64, grid=(1,)) == [None, None]
    assert "nargs" not in vars(kernel)  # warmup bound its args on the copy, not on the traced autotuner
    with pytest.raises(TypeError):  # why a shallow copy: the chain reaches a JITFunction and its RLock
        copy.deepcopy(kernel)
    _launch(traced)


def test_heuristics_only_kernel_is_traced():
    kernel = kernels.make_autotuned()
    heur = kernel.fn
    traced = TritonTrace(heur)
    x, out = torch.randn(100), torch.empty(100)
    traced[(1,)](x, out, 100, BLOCK=128)
    assert torch.equal(out, x * 2.0)
    rec = traced.records[-1]
    assert rec.config["heuristics"] == {"EVEN": False}
    assert rec.config["constexprs"] == {"BLOCK": 128, "EVEN": False}
    assert "autotune" not in rec.config


@needs_listener
def test_gluon_autotune_listener_sees_jit_function(listener_calls):
    kernel = gluon_kernels.make_gluon_autotuned()
    jit_fn = kernel.fn.fn
    assert compat.is_gluon(jit_fn)
    traced = GluonTrace(kernel)
    assert traced.jit_fn is jit_fn
    _gluon_launch(traced)
    assert len(listener_calls) == 1
    call = listener_calls[0]
    assert call["fn"] is jit_fn
    assert call["best_config"].kwargs == {"BLOCK": 128}
    assert call["cache_hit"] is False
    assert set(c.kwargs["BLOCK"] for c in call["configs_timings"]) == {128, 64}
    _gluon_launch(traced)  # same key: a cache hit, no second tuning
    assert len(listener_calls) == 1


def test_gluon_autotune_retrace_keeps_jit_function(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    kernel = gluon_kernels.make_gluon_autotuned(cache_results=True)
    jit_fn = kernel.fn.fn
    first = GluonTrace(kernel)
    assert kernel.cache_results is False
    _gluon_launch(first)
    second = GluonTrace(kernel)
    assert second.jit_fn is jit_fn
    assert second.leaf is first.leaf
    _gluon_launch(second, n=512)
    rec = second.records[-1]
    assert rec.config["autotune"]["chosen"]["kwargs"] == {"BLOCK": 128}
    assert rec.config["heuristics"] == {"EVEN": True}
    assert glob.glob(str(tmp_path / "**" / "*.autotune.json"), recursive=True) == []


def test_gluon_traced_autotuner_sits_on_an_interpreted_leaf():
    kernel = gluon_kernels.make_gluon_autotuned()
    jit_fn = kernel.fn.fn
    traced = GluonTrace(kernel)
    leaf = kernel.fn.fn
    assert isinstance(leaf, _InterpretedLeaf)
    assert leaf.fn is jit_fn and compat.is_gluon(leaf.fn)
    assert leaf.gluon is True
    assert isinstance(leaf.interpreted, compat.InterpretedFunction)
    assert leaf.interpreted.fn is jit_fn.fn
    assert leaf.arg_names == ["x_ptr", "out_ptr", "n", "BLOCK", "EVEN"]
    assert traced.layers == [kernel, kernel.fn] and traced.leaf is leaf
    assert kernel.cache_results is False


def test_gluon_heuristics_only_kernel_is_traced():
    kernel = gluon_kernels.make_gluon_autotuned()
    heur = kernel.fn
    jit_fn = heur.fn
    traced = GluonTrace(heur)
    assert heur.fn is traced.leaf and traced.leaf.fn is jit_fn
    assert traced.leaf.gluon is True and traced.layers == [heur]
    x, out = torch.randn(100), torch.empty(100)
    traced[(1,)](x, out, 100, BLOCK=128)
    assert torch.equal(out, x * 2.0)
    rec = traced.records[-1]
    assert rec.config["heuristics"] == {"EVEN": False}
    assert rec.config["constexprs"] == {"BLOCK": 128, "EVEN": False}
    assert "autotune" not in rec.config


def test_trace_picks_gluon_trace_for_gluon_kernels():
    assert type(tilelens_trace(gluon_kernels.make_gluon_autotuned())) is GluonTrace
    assert type(tilelens_trace(kernels.make_autotuned())) is TritonTrace
