"""``benchmarks.reference_wrappers``: the bench's reference interpositions pass every launch through unchanged,
take exactly what they say, and leave Triton's methods as they found them. Run on the CPU over the stand-in
kernels with the fake compiled runner (``benchmarks.standin``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.jit import JITFunction

from benchmarks import reference_wrappers
from benchmarks.standin import MM_KEY, mm_like, rms_like
from benchmarks.standin import stand_in_run as _untraced_run


@pytest.fixture
def fake_compiled() -> Iterator[list[tuple[Any, tuple[Any, ...], dict[str, Any]]]]:
    """``JITFunction.run`` as the fake compiled runner, logging each call it receives."""
    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append((self, args, dict(kwargs)))
        return _untraced_run(self, *args, **kwargs)

    original = JITFunction.run
    JITFunction.run = run  # type: ignore[method-assign]
    mm_like.cache[MM_KEY] = mm_like.configs[0]
    try:
        yield calls
    finally:
        JITFunction.run = original  # type: ignore[method-assign]


def _launch_both(tensors: dict[str, torch.Tensor]) -> tuple[Any, Any]:
    a, b, c = tensors["a"], tensors["b"], tensors["c"]
    x, w, y, rstd = tensors["x"], tensors["w"], tensors["y"], tensors["rstd"]
    first = mm_like[lambda m: (4,)](a, b, c, 64, 64, 64)
    second = rms_like[(64,)](x, w, y, rstd, x.stride(0), 128, 1e-6, BLOCK=128, num_warps=4)
    return first, second


@pytest.fixture
def tensors() -> dict[str, torch.Tensor]:
    x = torch.zeros(64, 128)
    return {
        **{name: torch.zeros(64, 64, dtype=torch.bfloat16) for name in "abc"},
        "x": x,
        "w": torch.ones(128),
        "y": torch.empty_like(x),
        "rstd": torch.empty(64),
    }


def test_the_wrapper_passes_every_call_and_result_through(fake_compiled: list, tensors: dict) -> None:
    expected = _launch_both(tensors)
    untraced_calls = [(jit, args, kwargs) for jit, args, kwargs in fake_compiled]
    fake_compiled.clear()
    with reference_wrappers.installed("wrapper") as sink:
        got = _launch_both(tensors)
    assert got == expected
    # the runner saw the same launches with the same arguments (the grid lambda is a new object each call)
    assert [(j, a, {k: v for k, v in kw.items() if k != "grid"}) for j, a, kw in fake_compiled] == [
        (j, a, {k: v for k, v in kw.items() if k != "grid"}) for j, a, kw in untraced_calls
    ]
    assert sink.rows == [] and sink.configs == [] and sink.launches == 0


def test_the_capture_takes_pointer_shape_strides_dtype_and_the_config(
    fake_compiled: list, tensors: dict
) -> None:
    with reference_wrappers.installed("capture") as sink:
        _launch_both(tensors)
    assert sink.launches == 2
    (mm_jit, mm_grid, mm_values), (rms_jit, rms_grid, rms_values) = sink.rows
    assert mm_jit is mm_like.fn and rms_jit is rms_like
    assert callable(mm_grid) and rms_grid == (64,)
    a = tensors["a"]
    assert mm_values[0] == (a.data_ptr(), a.shape, (64, 1), torch.bfloat16)
    assert mm_values[3:] == [64, 64, 64]
    x = tensors["x"]
    assert rms_values[0] == (x.data_ptr(), torch.Size([64, 128]), (128, 1), torch.float32)
    assert rms_values[4:] == [128, 128, 1e-6]
    assert sink.configs == [mm_like.configs[0]]


def test_the_capture_keeps_a_bounded_list(
    fake_compiled: list, tensors: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reference_wrappers, "KEPT", 3)
    with reference_wrappers.installed("capture") as sink:
        for _ in range(2):
            _launch_both(tensors)
    assert sink.launches == 4
    assert len(sink.rows) == 1  # emptied at the third row, then the fourth launch's
    assert sink.rows[0][0] is rms_like


@pytest.mark.parametrize("kind", reference_wrappers.KINDS)
def test_triton_methods_are_restored_also_after_an_error(kind: str) -> None:
    before = (JITFunction.run, Autotuner.run, Heuristics.run)
    with pytest.raises(RuntimeError, match="inside"), reference_wrappers.installed(kind):
        assert JITFunction.run is not before[0]
        assert Autotuner.run is not before[1] and Heuristics.run is not before[2]
        raise RuntimeError("inside")
    assert (JITFunction.run, Autotuner.run, Heuristics.run) == before


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="wrapper"), reference_wrappers.installed("tracer"):
        pass
