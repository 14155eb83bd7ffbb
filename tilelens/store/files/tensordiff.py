"""Two stored tensors compared element by element: bit for bit first, then the size of the differences.

Equal content hashes mean equal bytes, so two unchanged outputs cost no blob read. Otherwise both tensors are
read and their elements compared as raw bytes (so ``-0.0`` and ``0.0`` differ, and a NaN equals the same NaN);
for the elements that differ, the largest absolute and relative errors are computed in float64 (complex in
complex128), relative to the first tensor's value (a NaN against a number makes both NaN).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass
class TensorDiff:
    """One tensor argument after launch A against after launch B."""

    position: int
    name: str
    same: bool
    bit_exact: bool  # equal content hashes (then nothing else was read)
    elements: int | None = None  # elements compared (None: shapes or dtypes differ, or no data)
    differing: int = 0
    first_index: list[int] | None = None  # index (per dimension) of the first differing element, C order
    first_a: Any = None
    first_b: Any = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    note: str | None = None  # why no element compare was made


def compare_blobs(blobs_dir: Path, position: int, name: str, a: str | None, b: str | None) -> TensorDiff:
    if a == b:
        return TensorDiff(position, name, same=True, bit_exact=True)
    if a is None or b is None:
        return TensorDiff(position, name, False, False, note="only one launch stored this tensor")
    from tilelens.store.files.blobs import BlobStore

    store = BlobStore(blobs_dir)
    return compare_snapshots(position, name, store.get_snapshot(a), store.get_snapshot(b))


def compare_snapshots(position: int, name: str, a: Any, b: Any) -> TensorDiff:
    """Whole tensors element by element; with a sparse snapshot (``tilelens.store.files.sparse``) on either side,
    the span elements both sides hold (the others are unknown), indices then being span positions."""
    from tilelens.store.files.sparse import SparseSnapshot

    if not isinstance(a, SparseSnapshot) and not isinstance(b, SparseSnapshot):
        return compare_tensors(position, name, a, b)
    import numpy as np
    import torch

    index_a, values_a = _span_values(a)
    index_b, values_b = _span_values(b)
    if values_a.dtype != values_b.dtype:
        return TensorDiff(position, name, False, False, note=f"{values_a.dtype} against {values_b.dtype}")
    common = index_a if index_b is None else index_b if index_a is None else np.intersect1d(index_a, index_b)
    if common is None:
        common = np.arange(values_a.numel(), dtype=np.int64)

    def pick(index: np.ndarray | None, values: torch.Tensor) -> torch.Tensor:
        at = common if index is None else np.searchsorted(index, common)
        return values[torch.from_numpy(at)]

    out = compare_tensors(position, name, pick(index_a, values_a), pick(index_b, values_b))
    if out.first_index is not None:
        out.first_index = [int(common[out.first_index[0]])]
    out.note = (
        f"sparse snapshot: compared the {len(common)} span elements both launches recorded; "
        "the others are unknown (neither launch touched them), first index is a span position"
    )
    return out


def _span_values(s: Any) -> tuple[Any, Any]:
    """(sorted span positions or None for all of them, values) of a snapshot."""
    from tilelens.store.files.sparse import SparseSnapshot

    if isinstance(s, SparseSnapshot):
        return s.index, s.values
    span = 0 if s.numel() == 0 else 1 + sum((n - 1) * st for n, st in zip(s.shape, s.stride()))
    return None, s.as_strided((span,), (1,), s.storage_offset())


def compare_tensors(position: int, name: str, a: torch.Tensor, b: torch.Tensor) -> TensorDiff:
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        note = f"{a.dtype} {list(a.shape)} against {b.dtype} {list(b.shape)}"
        return TensorDiff(position, name, False, False, note=note)
    import torch

    fa, fb = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
    n, width = fa.numel(), fa.element_size()
    differs = (fa.view(torch.uint8).reshape(n, width) != fb.view(torch.uint8).reshape(n, width)).any(dim=1)
    count = int(differs.sum())
    if count == 0:  # equal bytes under different hashes: the storages differ outside the view
        return TensorDiff(position, name, True, False, elements=n)
    where = torch.nonzero(differs).reshape(-1)
    first = int(where[0])
    index = [int(i) for i in _unravel(first, tuple(a.shape))]
    wide = torch.complex128 if a.is_complex() else torch.float64
    xa, xb = fa[where].to(wide), fb[where].to(wide)
    abs_err = (xa - xb).abs()
    # Numerically equal (0.0 and -0.0) is no relative error; any other difference from 0 is an infinite one.
    rel_err = torch.where(abs_err == 0, torch.zeros_like(abs_err), abs_err / xa.abs())
    return TensorDiff(
        position,
        name,
        same=False,
        bit_exact=False,
        elements=n,
        differing=count,
        first_index=index,
        first_a=fa[first].item(),
        first_b=fb[first].item(),
        max_abs_err=float(abs_err.max()),
        max_rel_err=float(rel_err.max()),
    )


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return out[::-1]
