"""The cheap half of recording a compiled launch: what the program's thread reads, and the rest later.

A compiled launch takes microseconds, so everything that can wait runs on the background writer
(``tilelens.core.compiled.writer.thread``): :func:`snap_arguments` keeps, per parameter, only immutable facts read at launch
time — a plain tensor becomes a tuple of its metadata (never a reference: the program may free or resize it),
a scalar (or a constexpr string) stays itself — and :func:`describe_snapped` turns them into the ``ArgumentRecord`` list that
``describe_arguments`` would have produced at launch time. Anything unusual (a ``triton.reinterpret``
wrapper, a TMA descriptor, an object of another type) is described at once, kept as a dict of its plain
fields. A snapped list holds plain values only: the writer process receives it marshalled.

Invariant: ``describe_snapped(params, snap_arguments(params, bound))`` equals
``describe_arguments(params, bound, snapshots=False)`` field by field.
"""

from __future__ import annotations

from typing import Any

import torch

from tilelens.core.kernel.arguments import Param, describe_arguments, jsonable, scalar_type
from tilelens.records import ArgumentRecord

_Tensor = torch.Tensor
_PLAIN = (int, float, bool)


# A plain tensor is snapped as a plain tuple (the only plain tuple in a snapped list): (dtype, shape,
# strides, storage offset, storage pointer, storage bytes, device), dtype and device as the text the record
# stores ("bfloat16", "cuda:0"). Only plain values: it is sent to the writer process, marshalled in C.


_DTYPES: dict[Any, str] = {}
_DEVICES: dict[Any, str] = {}


def _dtype_text(dtype: Any) -> str:
    text = _DTYPES.get(dtype)
    if text is None:
        text = _DTYPES[dtype] = str(dtype).removeprefix("torch.")
    return text


def _device_text(device: Any) -> str:
    text = _DEVICES.get(device)
    if text is None:
        text = _DEVICES[device] = str(device)
    return text


# An argument described at once is snapped as a dict (the only dict in a snapped list), plain values only:
# {"arg": the ArgumentRecord's fields in _DESCRIBED_FIELDS order, "storage": its storage pointer or None}.
# Its snapshot fields (before/after/touched) are None here: snapped launches carry no snapshots.
_DESCRIBED_FIELDS = (
    "position",
    "name",
    "kind",
    "dtype",
    "shape",
    "strides",
    "storage_offset",
    "device",
    "value",
    "storage_bytes",
    "value_type",
)


def _described(rec: ArgumentRecord, storage: int | None) -> dict[str, Any]:
    return {"arg": tuple(getattr(rec, f) for f in _DESCRIBED_FIELDS), "storage": storage}


def snap_arguments(params: list[Param], bound: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    get = bound.get
    for p in params:
        value = get(p.name)
        cls: Any = type(value)
        if value is None or cls in _PLAIN or (cls is str and p.constexpr):
            out.append(value)
        elif (cls is _Tensor or isinstance(value, _Tensor)) and not p.constexpr:
            s = value.untyped_storage()
            out.append(
                (
                    _DTYPES.get(value.dtype) or _dtype_text(value.dtype),
                    tuple(value.shape),
                    value.stride(),
                    value.storage_offset(),
                    s.data_ptr(),
                    s.nbytes(),
                    _DEVICES.get(value.device) or _device_text(value.device),
                )
            )
        else:  # rare: described now, with its storage pointer for grouping
            rec = describe_arguments([p], {p.name: value}, snapshots=False)[0]
            sp = None
            if rec.kind == "tensor":
                from tilelens.core.kernel.arguments import unwrap

                sp = unwrap(value).untyped_storage().data_ptr()
            out.append(_described(rec, sp))
    return out


class SnapPlan:
    """What :func:`snap_planned` needs of a kernel's parameters, computed once per kernel."""

    __slots__ = ("names", "runtime", "constexprs")

    def __init__(self, params: list[Param]) -> None:
        self.names = tuple(p.name for p in params)
        self.runtime = tuple(i for i, p in enumerate(params) if not p.constexpr)
        self.constexprs = tuple(i for i, p in enumerate(params) if p.constexpr)


def snap_planned(plan: SnapPlan, params: list[Param], bound: dict[str, Any]) -> tuple[list[Any], str]:
    """``(snap_arguments(params, bound), snapped_device(that list))``, faster (``plan = SnapPlan(params)``):
    the values are fetched in one C call, plain tensors among the runtime parameters are snapped inline, plain
    values stay as they are, anything else goes through ``snap_arguments`` for that one parameter. Same list,
    element by element."""
    values: list[Any] = list(map(bound.get, plan.names))
    dtypes, devices = _DTYPES, _DEVICES
    device: str | None = None  # the first plain tensor's
    described = False
    for i in plan.runtime:
        value = values[i]
        cls = type(value)
        if cls is _Tensor:
            s = value.untyped_storage()
            where = devices.get(value.device) or _device_text(value.device)
            values[i] = (
                dtypes.get(value.dtype) or _dtype_text(value.dtype),
                tuple(value.shape),
                value.stride(),
                value.storage_offset(),
                s.data_ptr(),
                s.nbytes(),
                where,
            )
            if device is None:
                device = where
        elif value is not None and cls not in _PLAIN:
            values[i] = snap_arguments([params[i]], bound)[0]
            described = True
    for i in plan.constexprs:
        value = values[i]
        cls = type(value)
        if value is not None and cls not in _PLAIN and cls is not str:
            values[i] = snap_arguments([params[i]], bound)[0]
            described = True
    if described:  # a tensor described at once may come first
        return values, snapped_device(values)
    return values, "cpu" if device is None else device


def snapped_device(snapped: list[Any]) -> str:
    """The device ``describe_snapped`` will give the launch (its first tensor argument's), without describing."""
    for value in snapped:
        if type(value) is tuple:
            return str(value[6])
        if type(value) is dict:
            kind, device = value["arg"][2], value["arg"][7]
            if kind == "tensor" and device:
                return str(device)
    return "cpu"


def describe_snapped(params: list[Param], snapped: list[Any]) -> list[ArgumentRecord]:
    groups: dict[int, int] = {}
    records = []
    for p, value in zip(params, snapped):
        if type(value) is dict:
            rec = ArgumentRecord(**dict(zip(_DESCRIBED_FIELDS, value["arg"])))
            sp = value["storage"]
            if sp is not None:
                rec.storage_group = groups.setdefault(sp, len(groups))
            records.append(rec)
            continue
        rec = ArgumentRecord(position=p.position, name=p.name, kind="none")
        if p.constexpr:
            rec.kind, rec.value = "constexpr", jsonable(value)
            rec.value_type = scalar_type(value, p)
        elif value is None:
            rec.kind = "none"
        elif type(value) is tuple:
            dtype, shape, strides, offset, sp, nbytes, device = value
            rec.kind = "tensor"
            rec.dtype = dtype
            rec.shape = shape
            rec.strides = tuple(strides)
            rec.storage_offset = offset
            rec.storage_group = groups.setdefault(sp, len(groups))
            rec.storage_bytes = int(nbytes)
            rec.device = device
        else:
            rec.kind, rec.value = "scalar", jsonable(value)
            rec.value_type = scalar_type(value, p)
        records.append(rec)
    return records
