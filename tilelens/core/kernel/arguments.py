"""Binding a launch's arguments to kernel parameters, and snapshotting its tensors.

A snapshot is the flat byte span a tensor view can reach, copied to the host (so a strided view costs what it
can touch, not its whole storage); the view's real geometry (shape, strides, storage offset) stays on the
``ArgumentRecord``, which is all replay needs to rebuild it, aliasing included.
"""

from __future__ import annotations

import enum
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tilelens.core import compat
from tilelens.core.kernel import descriptors
from tilelens.core.kernel.spans import ArgSpan, SpanTable, StorageTable
from tilelens.records import ArgumentRecord


@dataclass(frozen=True)
class Param:
    position: int
    name: str
    constexpr: bool
    default: Any
    triton_type: str | None = None  # the Triton type an annotation fixed ("fp32", "i64"), else None


def kernel_params(pyfn: Any) -> list[Param]:
    params = []
    for i, p in enumerate(inspect.signature(pyfn).parameters.values()):
        ann = p.annotation
        is_constexpr = ann is compat.tl.constexpr or (isinstance(ann, str) and "constexpr" in ann)
        params.append(Param(i, p.name, is_constexpr, p.default, None if is_constexpr else _triton_type(ann)))
    return params


def _triton_type(ann: Any) -> str | None:
    """The Triton type a parameter annotation names (``x: tl.float32`` or ``x: "fp32"``), else None."""
    if ann is inspect.Parameter.empty:
        return None
    if isinstance(ann, compat.tl.dtype):
        return str(ann.name) if hasattr(ann, "name") else str(ann)
    if isinstance(ann, str):  # also every annotation under ``from __future__ import annotations``
        name = ann.strip("'\"").removeprefix("tl.").removeprefix("triton.language.")
        return name if name and name.replace("_", "").isalnum() else None
    return None


def scalar_type(value: Any, param: Param | None = None) -> str | None:
    """The Python type a scalar or constexpr is replayed with: "bool", "int" or "float" (plus ":<Triton
    type>" when the parameter's annotation fixed one); None for anything else.

    The JSON value alone is not enough: SQLite hands the text ``1.0`` back as the integer 1, and compiled
    Triton specializes an int equal to 1 as a constant, so a float scalar must come back a float.
    """
    value = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
    if isinstance(value, (bool, np.bool_)):
        kind = "bool"
    elif isinstance(value, (int, np.integer)):
        kind = "int"
    elif isinstance(value, (float, np.floating)):
        kind = "float"
    else:
        return None
    if param is not None and param.triton_type:
        return f"{kind}:{param.triton_type}"
    return kind


def bind(
    params: list[Param], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a launch into {parameter: value} (defaults applied) and {option: value} (num_warps, ...)."""
    names = {p.name for p in params}
    bound: dict[str, Any] = {}
    for p, value in zip(params, args):
        bound[p.name] = value
    options = {}
    for k, v in kwargs.items():
        if k in names:
            bound[k] = v
        elif k not in ("grid", "warmup"):
            options[k] = v
    for p in params:
        if p.name not in bound and p.default is not inspect.Parameter.empty:
            bound[p.name] = p.default
    return bound, options


def resolve_grid(grid: Any, bound: dict[str, Any]) -> tuple[int, int, int]:
    """The grid as compiled Triton computes it: a callable grid sees the bound arguments."""
    if callable(grid):
        grid = grid(bound)
    if not isinstance(grid, (tuple, list)):
        grid = (grid,)
    dims = [int(g) for g in grid]
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"grid must have 1 to 3 dimensions, got {grid!r}")
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def unwrap(value: Any) -> Any:
    base = getattr(value, "base", None)
    if isinstance(base, torch.Tensor) and not isinstance(value, torch.Tensor):
        return base  # triton.reinterpret's TensorWrapper
    return value


def is_tensor(value: Any) -> bool:
    return isinstance(unwrap(value), torch.Tensor)


def extent(t: torch.Tensor) -> int:
    """Number of elements from the view's first to its last reachable element."""
    if t.numel() == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def span_copy(t: torch.Tensor) -> torch.Tensor:
    """Host copy of the contiguous element span a view can reach (1-D, same dtype).

    CPU copies go through numpy on a byte view: a plain single-threaded memcpy. torch's own copy and compare
    kernels fan out to its intra-op thread pool, which on a small, busy machine costs milliseconds of thread
    wake-ups per tensor, more than the copy itself.
    """
    n = extent(t)
    if n == 0:
        return torch.empty(0, dtype=t.dtype)
    flat = t.detach().as_strided((n,), (1,))
    if flat.device.type != "cpu":
        return flat.to("cpu", copy=True)
    raw = flat.view(torch.uint8).numpy().copy()
    return torch.from_numpy(raw).view(t.dtype)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return bool(np.array_equal(a.view(torch.uint8).numpy(), b.view(torch.uint8).numpy()))


def jsonable(value: Any) -> Any:
    """A JSON-safe stand-in for a scalar, constexpr or option value."""
    value = getattr(value, "value", value) if type(value).__name__ == "constexpr" else value
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        # The tags of tilelens.store.files.jsonvalues (docs/sql.md, "JSON values").
        return {"$float": repr(value)}
    if isinstance(value, enum.Enum):
        return str(value)
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if _is_gluon_layout(value):  # a Gluon kernel's ``layout: gl.constexpr``: rebuilt for replay
        from tilelens.core.kernel import layouts

        return layouts.encode(value, jsonable)
    cls = type(value)
    return {"$type": f"{cls.__module__}.{cls.__qualname__}", "$repr": repr(value)}


def _is_gluon_layout(value: Any) -> bool:
    return type(value).__module__.startswith(compat.GLUON_LANGUAGE) and hasattr(value, "__dataclass_fields__")


def describe_arguments(
    params: list[Param],
    bound: dict[str, Any],
    snapshots: bool = True,
    deferred: dict[int, torch.Tensor] | None = None,
    defer: Callable[[torch.Tensor], bool] | None = None,
) -> list[ArgumentRecord]:
    """One record per parameter, with a 'before' snapshot of every tensor (unless ``snapshots`` is off).

    A tensor that ``defer`` picks (``tilelens.core.interpreted.touched.defer``) is not copied: it goes into ``deferred`` by
    position, for its snapshot to be built after the launch from what the launch touched.
    """
    groups: dict[int, int] = {}
    records = []
    for p in params:
        value = bound.get(p.name)
        rec = ArgumentRecord(position=p.position, name=p.name, kind="none")
        if p.constexpr:
            rec.kind, rec.value = "constexpr", jsonable(value)
            rec.value_type = scalar_type(value, p)
        elif value is None:
            rec.kind = "none"
        elif is_tensor(value):
            t = unwrap(value)
            sp = t.untyped_storage().data_ptr()
            rec.kind = "tensor"
            rec.dtype = str(t.dtype).removeprefix("torch.")
            rec.shape = tuple(t.shape)
            rec.strides = tuple(t.stride())
            rec.storage_offset = t.storage_offset()
            rec.storage_group = groups.setdefault(sp, len(groups))
            rec.storage_bytes = int(t.untyped_storage().nbytes())
            rec.device = str(t.device)
            if snapshots and deferred is not None and defer is not None and defer(t):
                deferred[p.position] = t
            else:
                rec.before = span_copy(t) if snapshots else None
            if descriptors.kind_of(value) is not None:  # a host TMA descriptor: its tensor, plus the box
                rec.value = descriptors.describe(value, jsonable)
            elif t is not value:
                rec.value = {"reinterpret": str(value.dtype)}
        elif isinstance(value, (bool, int, float, np.integer, np.floating)):
            rec.kind, rec.value = "scalar", jsonable(value)
            rec.value_type = scalar_type(value, p)
        else:
            rec.kind, rec.value = "other", jsonable(value)
        records.append(rec)
    return records


def capture_after(params: list[Param], bound: dict[str, Any], records: list[ArgumentRecord]) -> None:
    """Fill ``after`` for tensors the launch changed; unchanged tensors keep ``after`` = None."""
    for p, rec in zip(params, records):
        if rec.kind != "tensor" or rec.before is None:
            continue
        now = span_copy(unwrap(bound[p.name]))
        if not same_bytes(now, rec.before):
            rec.after = now


def host_spans(params: list[Param], host_args: tuple[Any, ...], host_kwargs: dict[str, Any]) -> SpanTable:
    """Byte spans of the tensors the interpreter actually reads (host copies for device tensors).

    Besides each view's span, the table holds each whole storage (the interpreter's host copy of a device
    tensor copies its whole storage), which is what the bounds guard lets stores write.
    """
    bound, _ = bind(params, tuple(host_args), dict(host_kwargs))
    spans = []
    storages = []
    for p in params:
        value = bound.get(p.name)
        for t in _tensors_in(value):
            storage = t.untyped_storage()
            s0, s1 = storage.data_ptr(), storage.data_ptr() + storage.nbytes()
            if storage.nbytes():
                storages.append((s0, s1))
            n = extent(t)
            if n == 0:
                continue
            itemsize = t.element_size()
            start = t.data_ptr()
            spans.append(ArgSpan(p.position, start, start + n * itemsize, itemsize, s0, s1))
    return SpanTable(spans, StorageTable(storages))


def _tensors_in(value: Any) -> list[torch.Tensor]:
    value = unwrap(value)
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple):
        return [t for v in value for t in _tensors_in(v)]
    base = getattr(value, "base", None)  # TensorDescriptor
    if base is not None and hasattr(value, "block_shape"):
        return _tensors_in(base)
    return []


def config_dict(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` as JSON: meta-parameters and launch options."""
    out: dict[str, Any] = {"kwargs": jsonable(dict(config.kwargs))}
    for name in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        value = getattr(config, name, None)
        if value is not None:
            out[name] = jsonable(value)
    return out
