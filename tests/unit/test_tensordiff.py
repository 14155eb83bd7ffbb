"""Element-by-element tensor compare of ``tilelens diff``: bit for bit, then the size of the differences."""

from __future__ import annotations

import math

import torch

from tilelens.store.files.tensordiff import compare_tensors


def test_bits_decide_and_errors_are_measured_on_the_differing_elements() -> None:
    a = torch.tensor([[1.0, 2.0, 0.0], [4.0, float("nan"), 8.0]])
    b = torch.tensor([[1.0, 2.5, -0.0], [4.0, float("nan"), 6.0]])
    d = compare_tensors(2, "out", a, b)
    # -0.0 differs from 0.0 in its bits; the NaNs are the same NaN.
    assert (d.same, d.elements, d.differing, d.first_index, d.first_a, d.first_b) == (
        False, 6, 3, [0, 1], 2.0, 2.5,
    )  # fmt: skip
    assert d.max_abs_err == 2.0  # |8 - 6|; the zeros differ by 0
    assert d.max_rel_err == 0.25  # 0.5 / 2.0 and 2 / 8; 0.0 against -0.0 is no relative error


def test_a_nan_against_a_number_and_a_change_from_zero() -> None:
    d = compare_tensors(0, "y", torch.tensor([0.0, 1.0]), torch.tensor([3.0, float("nan")]))
    assert d.differing == 2 and math.isnan(d.max_abs_err) and math.isnan(d.max_rel_err)
    d = compare_tensors(0, "y", torch.tensor([0.0, 1.0]), torch.tensor([3.0, 1.5]))
    assert (d.differing, d.max_abs_err, d.max_rel_err) == (2, 3.0, math.inf)


def test_equal_values_are_the_same_and_shapes_or_dtypes_that_differ_are_named() -> None:
    a = torch.arange(6, dtype=torch.int32)
    assert compare_tensors(0, "x", a, a.clone()).same is True
    d = compare_tensors(0, "x", a, a.reshape(2, 3))
    assert (d.same, d.note) == (False, "torch.int32 [6] against torch.int32 [2, 3]")
    assert compare_tensors(0, "x", a, a.to(torch.int64)).note == "torch.int32 [6] against torch.int64 [6]"
