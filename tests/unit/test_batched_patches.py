"""The batched attempt's patches: the builder's batched class is built once per grid, calls the builder's
methods as installed when it runs, and goes back (with everything else) also when the attempt raises."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from tilelens.core import compat
from tilelens.core import patches as interpreter
from tilelens.core.engine.access import AccessCollector
from tilelens.core.engine.batched import builder as batched_builder
from tilelens.core.engine.batched.state import BatchedHandle, TensorHandle, state_for
from tilelens.core.engine.writelog import WriteLog
from tilelens.core.patches import _Patcher


def _installed() -> tuple[Any, ...]:
    """What a batched attempt changes, by identity: the builder object's class and attributes, the builder
    class's methods, reductions and scans."""
    builder = compat.interpreter_module.interpreter_builder
    return (
        type(builder),
        {k: id(v) for k, v in vars(builder).items()},
        {k: id(v) for k, v in vars(compat.InterpreterBuilder).items()},
        compat.ReduceOps.apply,
        compat.ScanOps.apply,
    )


def test_batched_patches_go_back_when_the_attempt_raises() -> None:
    before = _installed()
    seen: list[type] = []
    with (
        pytest.raises(RuntimeError, match="inside the attempt"),
        interpreter.launch_patches(AccessCollector()) as ctx,
    ):
        # The tl tensor methods the attempt wraps exist once the interpreter patched tl for a launch.
        compat.interpreter_module._patch_lang(types.SimpleNamespace(__globals__={"tl": compat.tl}))
        state = state_for((4, 1, 1))
        with interpreter.batched_patches(ctx, state, WriteLog()):
            seen.append(type(compat.interpreter_module.interpreter_builder))
            seen.append(batched_builder.batched_class(compat.InterpreterBuilder, state))
            raise RuntimeError("inside the attempt")
    assert seen[0] is seen[1]
    assert seen[0] is not compat.InterpreterBuilder and issubclass(seen[0], compat.InterpreterBuilder)
    assert seen[0].__name__ == compat.InterpreterBuilder.__name__  # error messages name the stock class
    assert _installed() == before


def test_a_grid_keeps_its_state_and_batched_class() -> None:
    state = state_for((3, 1, 1))
    cls = batched_builder.batched_class(compat.InterpreterBuilder, state)
    state.active, state.held = False, 17
    again = state_for((3, 1, 1))
    assert again is state and (again.active, again.held) == (True, 0)
    assert batched_builder.batched_class(compat.InterpreterBuilder, again) is cls
    assert state_for((1, 3, 1)) is not state
    assert state_for((1, 3, 1)).programs == [(0, 0, 0), (0, 1, 0), (0, 2, 0)]


def test_the_batched_class_calls_the_methods_installed_when_it_runs() -> None:
    cls = batched_builder.batched_class(compat.InterpreterBuilder, state_for((3, 1, 1)))
    builder = compat.interpreter_module.interpreter_builder
    original = compat.InterpreterBuilder.create_add
    calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def spy(self: Any, lhs: Any, rhs: Any) -> Any:
        calls.append((np.shape(lhs.data), np.shape(rhs.data)))
        return original(self, lhs, rhs)

    one = TensorHandle(np.array([1], dtype=np.int32), compat.tl.int32)
    per_program = BatchedHandle(np.arange(3, dtype=np.int32).reshape(3, 1), compat.tl.int32)
    patcher = _Patcher()
    try:
        patcher.set(compat.InterpreterBuilder, "create_add", spy)  # installed after the class was built
        uniform = cls.create_add(builder, one, one)
        batched = cls.create_add(builder, per_program, one)
    finally:
        patcher.restore()
    assert compat.InterpreterBuilder.create_add is original
    assert calls == [((1,), (1,)), ((3, 1), (1,))]
    assert type(uniform) is TensorHandle and uniform.data.tolist() == [2]
    assert type(batched) is BatchedHandle and batched.data.tolist() == [[1], [2], [3]]


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _helper_loop_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    for _ in range(3):
        x = _twice(x)
    tl.store(out_ptr + offs, x)


@pytest.mark.parametrize("engine", ["batched", "program"])
def test_a_launch_patches_the_language_once_however_often_its_helpers_run(
    engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tilelens.core.interpreted.trace import TritonTrace

    module = compat.interpreter_module
    stock = module._patch_lang
    calls: list[str] = []

    def counting(fn: Any) -> Any:
        calls.append(fn.__name__)
        return stock(fn)

    monkeypatch.setattr(module, "_patch_lang", counting)
    monkeypatch.setenv("TILELENS_ENGINE", engine)
    traced = TritonTrace(_helper_loop_kernel, in_place=False)
    x = torch.arange(64, dtype=torch.float32)
    for _ in range(2):
        out = torch.empty(64)
        traced[(4,)](x, out, BLOCK=16)
        assert torch.equal(out, x * 8)
        assert traced.records[-1].config["engine"]["mode"] == engine
    # Once per launch, for the kernel: its helper (same module) runs 3 times per program (4 programs) unpatched.
    assert calls == ["_helper_loop_kernel", "_helper_loop_kernel"]
    assert traced.records[-1].trace.equals(traced.records[0].trace)


@triton.jit
def _sigmoid_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, _twice(tl.sigmoid(tl.load(x_ptr + offs))))  # tl.sigmoid: a helper of tl.core


def test_several_launches_in_one_patch_block_each_patch_the_language() -> None:
    """The kernel's language patches end with its grid (``GridExecutor`` undoes them): a second launch in the
    same ``launch_patches`` block skips none of its own."""
    interp = interpreter.make_interpreted(_sigmoid_kernel.fn)
    x = torch.linspace(-3, 3, 64)
    outs = [torch.empty(64) for _ in range(3)]
    ref = torch.empty(64)
    with interpreter.launch_patches(AccessCollector()):  # one launch: its own patching
        interp.run(x, ref, grid=(4,), warmup=False, BLOCK=16)
    with interpreter.launch_patches(AccessCollector()):
        for out in outs:
            interp.run(x, out, grid=(4,), warmup=False, BLOCK=16)
    assert torch.allclose(ref, torch.sigmoid(x) * 2)
    for out in outs:
        assert torch.equal(out, ref)
