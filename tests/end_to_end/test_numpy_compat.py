"""Triton 3.6's interpreter under numpy >= 2.4: a loop over a runtime bound records and computes exactly.

3.6 converts a scalar tensor (a numpy array of shape (1,)) to an index with ``int()``, which numpy >= 2.4
refuses and numpy 1.25 to 2.3 deprecate; TileLens installs 3.7's squeezing ``__index__`` for the launch
(``compat.INDEX_NEEDS_SQUEEZE``). The deprecation is made an error here, so under Triton 3.6 these tests
fail without the fix whatever numpy is installed; on later Triton the fix is forced on, so its code runs
(and is restored) on every version CI has.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from sqlalchemy import select

import tilelens
from tilelens.core import compat
from tilelens.core.engine import frontend
from tilelens.store import History
from tilelens.store.sql.models import Launch


@triton.jit
def strided_sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n, BLOCK):  # n is a runtime scalar: the loop bound goes through __index__
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@pytest.fixture
def strict_numpy(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(compat, "INDEX_NEEDS_SQUEEZE", True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=r".*ndim > 0 to a scalar", category=DeprecationWarning)
        yield


def test_scalar_index_takes_a_shape_1_handle(strict_numpy: None) -> None:
    handle = compat.TensorHandle(np.array([7], dtype=np.int32), tl.int32)
    value = frontend.scalar_index(type("T", (), {"handle": handle})())
    assert value == 7 and type(value) is int


def test_loop_over_runtime_bound_records_and_restores(tmp_path: Path, strict_numpy: None) -> None:
    module_fn = vars(compat.interpreter_module)[compat.PATCH_LANG_TENSOR]
    index_before = vars(tl.core.tensor).get("__index__")
    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty(32)
    where = {"db": str(tmp_path / "h.db"), "blobs": str(tmp_path / "blobs")}
    with tilelens.record(**where) as rec:
        strided_sum_kernel[(1,)](x, out, 100, BLOCK=32)
    expected = torch.zeros(32)
    for start in range(0, 100, 32):
        chunk = x[start : start + 32]
        expected[: len(chunk)] += chunk
    assert torch.equal(out, expected)
    assert rec.errors == 0 and rec.oob_lanes == 0
    with History.open(**where) as h, h.session() as s:
        (launch,) = s.scalars(select(Launch)).all()
        # Four iterations of a 32-lane load (the last one 4 lanes active), one 32-lane store.
        assert (launch.status, launch.loads, launch.stores) == ("ok", 4, 1)
        assert (launch.load_lanes, launch.store_lanes, launch.bytes_loaded) == (100, 32, 400)
    assert vars(compat.interpreter_module)[compat.PATCH_LANG_TENSOR] is module_fn
    assert vars(tl.core.tensor).get("__index__") is index_before
