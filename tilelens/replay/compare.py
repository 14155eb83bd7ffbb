"""Compare a replayed tensor with its recorded after-state: bit for bit, or within dtype-aware tolerances.

The interpreter replays the recorded computation exactly, so a CPU replay is held to the bits (a changed NaN
payload or the sign of a zero counts). A GPU runs other code (fused multiply-adds, approximate ``exp``, other
reduction orders, TF32 tensor cores), so a CUDA replay is held to tolerances that fit each dtype.

Default tolerances (``|replayed - recorded| <= atol + rtol * |recorded|``, NaN equal to NaN):

==================================  ======  ======
dtype                               atol    rtol
==================================  ======  ======
float64, complex128                 1e-9    1e-7
float32, complex64                  1e-5    1e-5
float32 from a TF32 ``tl.dot``      1e-2    1e-2
float16, complex32                  1e-3    2e-3    (~2 ulp)
bfloat16                            1e-2    1.6e-2  (~2 ulp)
float8 e4m3 variants                1e-2    0.25    (2 ulp)
float8 e5m2 variants                1e-2    0.5     (2 ulp)
integers, bool, other dtypes        0       0       (exact)
==================================  ======  ======

Kernels that call ``tl.dot`` get ``atol`` scaled by ``max(1, max|recorded|)`` of the tensor: a dot's rounding
error grows with its operands (roughly sqrt(K) times their product), and so does the output's scale, so the ratio
stays near a constant multiple of the unit roundoff whatever K is. Seen on an H200 (Triton 3.6): a 256x192x160
fp32 "ieee" dot differs from the interpreter by 3.2e-5 (outputs up to ~60), a 128^3 TF32 dot by 4.1e-2 (outputs
up to ~45). fp32 dots count as TF32 (Triton's default on NVIDIA GPUs) unless the kernel source says ``ieee`` or
``allow_tf32=False``. Only the kernel's own source is read: a dot inside a helper function is not seen, so
pass ``--atol``/``--rtol`` for such kernels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from tilelens.replay.result import TensorDiff

_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-9, 1e-7),
    torch.complex128: (1e-9, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.complex64: (1e-5, 1e-5),
    torch.float16: (1e-3, 2e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
}
for _name, _tol in (
    ("float8_e4m3fn", (1e-2, 0.25)),
    ("float8_e4m3fnuz", (1e-2, 0.25)),
    ("float8_e5m2", (1e-2, 0.5)),
    ("float8_e5m2fnuz", (1e-2, 0.5)),
    ("complex32", (1e-3, 2e-3)),
):
    if isinstance(getattr(torch, _name, None), torch.dtype):
        _TOLERANCES[getattr(torch, _name)] = _tol

TF32 = (1e-2, 1e-2)
# tl.dot / tl.dot_scaled, and Gluon's dots: dot_fma, mma_v2, warpgroup_mma (Hopper), tcgen05_mma (Blackwell).
_DOT_CALL = re.compile(r"\b(dot(_scaled|_fma)?|mma_v2|warpgroup_mma|tcgen05_mma(_scaled)?)\s*\(")
_IEEE = re.compile(r"""ieee|allow_tf32\s*=\s*False""")


def uses_dot(source: str) -> bool:
    return bool(_DOT_CALL.search(source))


def uses_tf32_dot(source: str) -> bool:
    """Whether the kernel's fp32 dots may run on TF32 tensor cores (Triton's default on NVIDIA GPUs)."""
    return uses_dot(source) and not _IEEE.search(source)


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


def default_tolerance(dtype: torch.dtype, recorded: torch.Tensor, source: str = "") -> Tolerance:
    """The defaults of the table above for a tensor of ``dtype`` written by a kernel with ``source``."""
    atol, rtol = _TOLERANCES.get(dtype, (0.0, 0.0))
    if not uses_dot(source) or (atol == 0.0 and rtol == 0.0):
        return Tolerance(atol, rtol)
    if dtype in (torch.float32, torch.complex64) and uses_tf32_dot(source):
        atol, rtol = TF32
    scale = float(_magnitude(recorded).nan_to_num(0.0, 0.0, 0.0).max()) if recorded.numel() else 0.0
    return Tolerance(atol * max(1.0, scale), rtol)


def compare_span(
    name: str,
    position: int,
    recorded: torch.Tensor,
    replayed: torch.Tensor,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    tolerance: Tolerance | None,
) -> TensorDiff:
    """Both spans are 1-D host tensors of one dtype; ``tolerance`` None means bit for bit."""
    dtype = str(recorded.dtype).removeprefix("torch.")
    diff = TensorDiff(position, name, dtype, equal=True, elements=recorded.numel())
    if recorded.shape != replayed.shape or recorded.dtype != replayed.dtype:
        diff.equal = False
        diff.mismatched = recorded.numel()
        diff.first_index = ""
        diff.first_recorded = f"{recorded.numel()} {dtype} elements"
        diff.first_replayed = f"{replayed.numel()} {str(replayed.dtype).removeprefix('torch.')} elements"
        return diff
    if _same_bytes(recorded, replayed):  # the common case on the CPU: no float pass over large tensors
        diff.max_abs_err = diff.max_rel_err = None if recorded.dtype == torch.bool else 0.0
        return diff
    bits_differ = _differs(recorded, replayed)
    exp, act = _numeric(recorded), _numeric(replayed)
    if exp is not None and act is not None:
        err = (exp - act).abs().to(torch.float64)
        both_nan = exp.isnan() & act.isnan()
        one_nan = exp.isnan() ^ act.isnan()
        same = (exp == act) | both_nan
        err = torch.where(same, torch.zeros_like(err), err)
        err = torch.where(one_nan, torch.full_like(err, float("inf")), err)
        ref = exp.abs().to(torch.float64)
        rel = torch.where(err == 0, torch.zeros_like(err), err / ref)
        if tolerance is None or not (recorded.is_floating_point() or recorded.is_complex()):
            bad = bits_differ
        else:
            bad = ~same & (one_nan | (err > tolerance.atol + tolerance.rtol * ref))
        if err.numel():
            worst = int(torch.argmax(err.nan_to_num(float("inf"))))
            diff.max_abs_err = float(err.max())
            diff.max_rel_err = float(rel.nan_to_num(float("inf")).max())
        if diff.max_abs_err:
            diff.worst_index = view_index(worst, shape, strides)
            diff.worst_recorded = _item(recorded[worst])
            diff.worst_replayed = _item(replayed[worst])
    else:
        bad = bits_differ
    count = int(bad.sum())
    if count:
        first = int(bad.nonzero()[0, 0])
        diff.equal = False
        diff.mismatched = count
        diff.first_offset = first
        diff.first_index = view_index(first, shape, strides)
        diff.first_recorded = _item(recorded[first])
        diff.first_replayed = _item(replayed[first])
    return diff


def view_index(offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """``[i, j]`` when the span offset is an element of the view, else ``span[k]`` (a gap between rows)."""
    order = sorted(range(len(shape)), key=lambda d: strides[d], reverse=True)
    index = [0] * len(shape)
    rest = offset
    for d in order:
        if strides[d] > 0 and shape[d] > 1:
            index[d] = min(rest // strides[d], shape[d] - 1)
            rest -= index[d] * strides[d]
    if rest == 0:
        return "[" + ", ".join(str(i) for i in index) + "]"
    return f".span[{offset}]"


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    # numpy compares raw bytes in one pass without waking torch's thread pool.
    return bool(np.array_equal(_raw(a), _raw(b)))


def _raw(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.uint8).numpy() if t.numel() else np.zeros(0, dtype=np.uint8)


def _differs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per element: do the exact bits differ (so -0.0 != 0.0 and NaN payloads count)."""
    size = a.element_size()
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(size)
    if as_int is not None:
        return a.contiguous().view(as_int) != b.contiguous().view(as_int)
    wide_a = a.contiguous().view(torch.uint8).reshape(a.numel(), size)
    wide_b = b.contiguous().view(torch.uint8).reshape(b.numel(), size)
    return (wide_a != wide_b).any(dim=1)


def _numeric(t: torch.Tensor) -> torch.Tensor | None:
    if t.dtype == torch.bool:
        return None
    try:
        return t.to(torch.complex128) if t.is_complex() else t.to(torch.float64)
    except (RuntimeError, TypeError):  # dtypes torch cannot convert on the host (packed fp4)
        return None


def _magnitude(t: torch.Tensor) -> torch.Tensor:
    n = _numeric(t)
    return torch.zeros(0) if n is None else n.abs().to(torch.float64)


def _item(t: torch.Tensor) -> object:
    try:
        value = t.item()
    except (RuntimeError, TypeError):
        return "0x" + t.reshape(1).view(torch.uint8).numpy().tobytes().hex()
    return value if not isinstance(value, complex) else str(value)
