"""The native accessor's memory discipline: every reference it takes it gives back, on every path.

Runs without Triton (nothing here imports it), so ``.ci/run`` also runs this file with the accessor built
under AddressSanitizer (``TILELENS_NATIVE_SANITIZE=address``; Triton's own library does not load under ASan).
Each case is captured many times: a leaked reference shows as a grown ``sys.getrefcount``, a use after free
or an overflow as ASan's report.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch

RUNS = 2000


def _plan(names: list[str], constexprs: tuple[str, ...] = ()) -> Any:
    flags = bytes(1 if n in constexprs else 0 for n in names)
    return types.SimpleNamespace(order=(tuple(names), flags))


class Sub(torch.Tensor):
    pass


def _cases() -> list[tuple[Any, dict[str, Any], bool]]:
    """(plan, bound, whether a capture is expected)."""
    base = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    names = ["x", "y", "n", "s", "flag", "none", "BLOCK", "MODE"]
    plan = _plan(names, ("BLOCK", "MODE"))
    good = {
        "x": base,
        "y": base[2:, 1::2],
        "n": 7,
        "s": 0.5,
        "flag": True,
        "none": None,
        "BLOCK": 64,
        "MODE": "a",
    }
    cases: list[tuple[Any, dict[str, Any], bool]] = [
        (plan, good, True),
        (plan, {**good, "x": torch.zeros(0)}, True),
        (plan, {**good, "x": torch.tensor(3.0)}, True),
        (plan, {**good, "x": base.t()}, True),
        (plan, {**good, "x": torch.zeros(1, dtype=torch.int32).expand(6)}, True),
        (plan, {**good, "x": torch.zeros(4, device="meta")}, True),
        (plan, {**good, "n": 2**70}, True),  # a big int scalar: kept as the object
        (plan, {**good, "BLOCK": float("nan")}, True),
        (plan, {**good, "x": torch.zeros(4).to_sparse()}, False),
        (plan, {**good, "x": torch.zeros(4).as_subclass(Sub)}, False),
        (plan, {**good, "x": object()}, False),
        (plan, {**good, "MODE": (1, 2)}, False),
        (plan, {k: v for k, v in good.items() if k != "s"}, False),
        (plan, [], False),  # not a dict
    ]
    return cases


def _counts(objects: list[Any]) -> list[int]:
    """Reference counts of ``objects``, leaving out the ones every module shares (True, small ints, None,
    interned strings): other code moves their counts."""
    return [sys.getrefcount(v) for v in objects if type(v) not in (bool, int, float, str, type(None))]


def test_captures_many_times_leave_every_reference_count_as_it_was(native_module: Any) -> None:
    capture = native_module.capture
    for plan, bound, expected in _cases():
        values = list(bound.values()) if isinstance(bound, dict) else []
        first = capture(plan, bound, None)
        assert (first is not None) is expected, bound
        last = None if first is None else first[0]
        before = _counts([plan, bound, last, *values])
        same = 0
        for _ in range(RUNS):
            got = capture(plan, bound, last)
            same += got is not None and got[0] is last  # equal to the last signature: that very object
        got = None
        assert same == (RUNS if expected else 0)
        assert _counts([plan, bound, last, *values]) == before


def test_a_plan_of_another_shape_is_a_type_error_and_leaks_nothing(native_module: Any) -> None:
    bad = [types.SimpleNamespace(order=("x",)), types.SimpleNamespace(order=(("x",), b"\0\0")), object()]
    x = torch.zeros(2)
    bound = {"x": x}
    before = _counts([x, bound, *bad])
    refused = 0
    for i in range(3 * (RUNS // 10)):
        try:
            native_module.capture(bad[i % 3], bound, None)
        except (TypeError, AttributeError):
            refused += 1
    assert refused == 3 * (RUNS // 10)
    assert _counts([x, bound, *bad]) == before
