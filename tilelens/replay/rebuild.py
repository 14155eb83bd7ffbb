"""Rebuild a launch's arguments from their snapshots, aliasing included.

A snapshot holds the element span one view can reach, starting at its first element; the row holds the view's
geometry. Tensors recorded in one storage group shared a storage, so they get one storage again: sized for every
member's ``storage_offset + span``, filled member by member in bytes (a group may mix dtypes, e.g. a float view
and an int view of one buffer), and each view is ``set_`` onto it with its recorded offset, shape and strides.
A kernel that writes through one view and reads through another then sees its own writes, as it did.

A storage is rebuilt with the size it had at record time (``storage_bytes``), so lanes past it are stray
again, exactly as recorded (dropped stores, and loads the recorder kept from memory); what out-of-bounds loads
read comes back from the trace (``tilelens.replay.oobreads``), not from the rebuilt memory. Records without a
storage size (made before migration 0003), and storages far larger than what their views reach, get a zeroed
guard after the last recorded byte instead: unmasked out-of-bounds reads then read zeros that belong to no
argument, instead of whichever tensor the allocator happened to place next.

A sparse snapshot (:mod:`tilelens.store.files.sparse`) holds only the elements the recorded launch touched: they are
written over zeros, after the group's whole spans, and the rest of the span is *unknown* (``RebuiltTensor.known``):
the recorded launch neither read nor wrote it, so its expected after-value is what the rebuild put there, and a
CPU replay that reads it is told apart (``tilelens.replay.unknown``).

For a GPU replay each group is rebuilt inside a larger buffer, ``margin`` bytes on both sides, with the bytes
the recorded out-of-bounds lanes read placed where the compiled kernel will read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tilelens.core.kernel.arguments import span_copy
from tilelens.replay.result import ReplayFailure
from tilelens.store import BlobError, BlobStore
from tilelens.store.files.sparse import SparseSnapshot
from tilelens.store.files.tensors import DTYPES
from tilelens.store.read.launches import ArgSpec, LaunchSpec

GUARD_BYTES = 16 * 1024
# A storage is rebuilt at its recorded size only when that costs at most this much beyond what its views reach.
MAX_STORAGE_PAD = 256 * 1024 * 1024


@dataclass
class RebuiltTensor:
    spec: ArgSpec
    view: torch.Tensor  # what the kernel gets (a TensorWrapper's base when reinterpreted)
    expected: torch.Tensor  # recorded state after the launch: the span, 1-D, on the host
    # A sparse snapshot's known span elements (sorted); None when the whole span was recorded. The others
    # are unknown: rebuilt as zeros, and expected unchanged (the recorded launch did not write them).
    known: np.ndarray | None = None


@dataclass
class RebuiltArgs:
    kwargs: dict[str, Any] = field(default_factory=dict)  # every parameter by name, constexprs included
    tensors: list[RebuiltTensor] = field(default_factory=list)


def span_elements(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    if any(n == 0 for n in shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def rebuild_arguments(
    blobs: BlobStore,
    launch: LaunchSpec,
    device: torch.device,
    placed: dict[Any, list[tuple[int, bytes]]] | None = None,
    margin: int = 0,
) -> RebuiltArgs:
    """The launch's arguments on ``device``; ``placed`` (by storage group: byte offset from the storage's
    start, bytes) is written around the storages, which then get ``margin`` spare bytes on both sides."""
    out = RebuiltArgs()
    tensors = [a for a in launch.args if a.kind == "tensor"]
    snapshots = {a.position: _load(blobs, launch, a, a.before_blob, "before") for a in tensors}
    groups: dict[Any, list[ArgSpec]] = {}
    for a in tensors:
        key = a.storage_group if a.storage_group is not None else ("alone", a.position)
        groups.setdefault(key, []).append(a)
    views: dict[int, torch.Tensor] = {}
    for key, members in groups.items():
        extra = (placed or {}).get(key, [])
        views.update(_rebuild_group(launch, members, snapshots, device, extra, margin))
    for a in launch.args:
        if a.kind == "tensor":
            after = (
                snapshots[a.position]
                if a.after_blob in (None, a.before_blob)
                else _load(blobs, launch, a, a.after_blob, "after")
            )
            known = None
            if isinstance(after, SparseSnapshot):  # what the rebuilt span holds, with the known after-values
                known = after.index
                after = after.dense(span_copy(views[a.position]))
            out.tensors.append(RebuiltTensor(a, views[a.position], after, known))
            out.kwargs[a.name] = _maybe_reinterpret(launch, a, views[a.position])
        elif a.kind == "none":
            out.kwargs[a.name] = None
        else:
            out.kwargs[a.name] = typed_value(decode_value(launch, a.name, a.value), a.value_type)
    # The config's constexprs are what the kernel was specialised on (heuristics and autotune choices included).
    types = {a.name: a.value_type for a in launch.args}
    for name, value in launch.constexprs.items():
        out.kwargs[name] = typed_value(decode_value(launch, name, value), types.get(name))
    return out


def typed_value(value: Any, value_type: str | None) -> Any:
    """A scalar with the Python type it was recorded with (``ArgSpec.value_type``).

    A float 1.0 read back from SQLite is the int 1; compiled Triton would specialize that int as a constant
    (``x.to(tl.float32)`` then fails to compile). Values of another shape, and records without a type
    (before migration 0012), are returned as they are.
    """
    kind = (value_type or "").partition(":")[0]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if kind == "float":
        return float(value)
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind == "bool":
        return bool(value)
    return value


def _load(
    blobs: BlobStore, launch: LaunchSpec, a: ArgSpec, sha: str | None, which: str
) -> torch.Tensor | SparseSnapshot:
    if sha is None:
        raise ReplayFailure(f"launch {launch.id}: argument {a.name} has no {which} snapshot to rebuild from")
    try:
        t = blobs.get_snapshot(sha)
    except BlobError as exc:
        raise ReplayFailure(f"launch {launch.id}: argument {a.name} ({which} snapshot): {exc}") from None
    except ValueError as exc:  # not a tensor this code can decode
        raise ReplayFailure(
            f"launch {launch.id}: argument {a.name} ({which} snapshot) blob {sha}: {exc}"
        ) from None
    return t if isinstance(t, SparseSnapshot) else t.reshape(-1)


def _dtype(launch: LaunchSpec, a: ArgSpec) -> torch.dtype:
    dtype = DTYPES.get(a.dtype or "")
    if dtype is None:
        raise ReplayFailure(
            f"launch {launch.id}: argument {a.name} has dtype {a.dtype!r}, which cannot be rebuilt"
        )
    return dtype


def storage_size(members: list[ArgSpec]) -> int:
    """Bytes a storage group is rebuilt with: its recorded size, else what its views reach plus a guard."""
    needed = 0
    for a in members:
        dtype = DTYPES.get(a.dtype or "")
        if dtype is None or a.shape is None or a.strides is None or a.storage_offset is None:
            continue
        needed = max(needed, (a.storage_offset + span_elements(a.shape, a.strides)) * dtype.itemsize)
    recorded = [a.storage_bytes for a in members if a.storage_bytes is not None]
    if recorded and needed <= max(recorded) <= needed + MAX_STORAGE_PAD:
        return max(recorded)
    return needed + GUARD_BYTES


def _rebuild_group(
    launch: LaunchSpec,
    members: list[ArgSpec],
    snapshots: dict[int, torch.Tensor | SparseSnapshot],
    device: torch.device,
    extra: list[tuple[int, bytes]],
    margin: int,
) -> dict[int, torch.Tensor]:
    placed = []
    for a in members:
        if a.shape is None or a.strides is None or a.storage_offset is None:
            raise ReplayFailure(f"launch {launch.id}: argument {a.name} was recorded without its geometry")
        dtype = _dtype(launch, a)
        span = span_elements(a.shape, a.strides)
        snap = snapshots[a.position]
        count = snap.span if isinstance(snap, SparseSnapshot) else snap.numel()
        if snap.dtype != dtype or count != span:
            raise ReplayFailure(
                f"launch {launch.id}: argument {a.name} snapshot holds {count} {snap.dtype} elements, "
                f"its view ({a.dtype}, shape {list(a.shape)}, strides {list(a.strides)}) reaches {span}"
            )
        start = a.storage_offset * dtype.itemsize
        placed.append((a, dtype, start, snap))
    nbytes = margin + storage_size(members) + margin
    snaps = [
        (margin + start, snap) for _a, _dt, start, snap in placed if not isinstance(snap, SparseSnapshot)
    ]
    sparse = [(margin + start, snap) for _a, _dt, start, snap in placed if isinstance(snap, SparseSnapshot)]
    raw = _fill(nbytes, snaps, device, [(margin + pos, data) for pos, data in extra])
    for start, snap in sparse:  # after the whole spans: only the known elements, over zeros
        _scatter(raw, start, snap)
    storage = raw.untyped_storage()
    views = {}
    for a, dtype, _start, _snap in placed:
        view = torch.empty(0, dtype=dtype, device=device)
        # placed holds only arguments with a layout: offset, shape and strides are set.
        view.set_(storage, a.storage_offset + margin // dtype.itemsize, a.shape, a.strides)  # type: ignore[operator,arg-type]
        views[a.position] = view
    return views


def _fill(
    nbytes: int,
    pieces: list[tuple[int, torch.Tensor]],
    device: torch.device,
    extra: list[tuple[int, bytes]] | None = None,
) -> torch.Tensor:
    """A zeroed byte buffer on ``device`` with each snapshot's bytes at its byte offset.

    Only the recorded bytes travel: a view deep into a large storage costs its span, not the zeros before it
    (calloc'd pages on the host, one memset on a GPU). ``extra`` (byte offset, bytes) goes in first, in one
    indexed copy, so a snapshot always wins over it.
    """
    if not extra:
        return _fill_snapshots(nbytes, pieces, device)
    raw = _fill_snapshots(nbytes, [], device)
    positions = np.concatenate([pos + np.arange(len(data), dtype=np.int64) for pos, data in extra])
    values = np.frombuffer(b"".join(data for _pos, data in extra), dtype=np.uint8)
    keep = (positions >= 0) & (positions < nbytes)
    raw[torch.from_numpy(positions[keep]).to(device)] = torch.from_numpy(values[keep].copy()).to(device)
    for start, snap in pieces:
        if snap.numel():
            data = snap.contiguous().view(torch.uint8).to(device)
            raw[start : start + data.numel()].copy_(data)
    return raw


def _fill_snapshots(
    nbytes: int, pieces: list[tuple[int, torch.Tensor]], device: torch.device
) -> torch.Tensor:
    if device.type == "cpu":
        # numpy, not torch: torch fills and copies large CPU tensors with its thread pool, whose wake-up alone
        # costs milliseconds on a busy machine, more than a small launch takes to interpret.
        host = np.zeros(nbytes, dtype=np.uint8)
        for start, snap in pieces:
            if snap.numel():
                data = snap.contiguous().view(torch.uint8).numpy()
                host[start : start + data.size] = data
        return torch.from_numpy(host)
    raw = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    for start, snap in pieces:
        if snap.numel():
            chunk = snap.contiguous().view(torch.uint8)
            raw[start : start + chunk.numel()].copy_(chunk)
    return raw


def _scatter(raw: torch.Tensor, start: int, snap: SparseSnapshot) -> None:
    """Write a sparse snapshot's known elements into ``raw`` (bytes) at byte offset ``start``."""
    if not snap.elements:
        return
    width = snap.dtype.itemsize
    where = start + snap.index[:, None] * width + np.arange(width, dtype=np.int64)
    data = snap.values.contiguous().view(torch.uint8).reshape(-1)
    if raw.device.type == "cpu":
        raw.numpy()[where.reshape(-1)] = data.numpy()
    else:
        raw[torch.from_numpy(where.reshape(-1)).to(raw.device)] = data.to(raw.device)


def _maybe_reinterpret(launch: LaunchSpec, a: ArgSpec, view: torch.Tensor) -> Any:
    if isinstance(a.value, dict) and "descriptor" in a.value:
        return _descriptor(launch, a, view)
    if not (isinstance(a.value, dict) and "reinterpret" in a.value):
        return view
    import triton
    import triton.language as tl

    name = a.value["reinterpret"]
    try:
        dtype = tl.dtype(str(name))
    except (AssertionError, ValueError, TypeError):
        raise ReplayFailure(
            f"launch {launch.id}: argument {a.name} was reinterpreted as {name!r}, not a Triton dtype this "
            "Triton knows"
        ) from None
    return triton.reinterpret(view, dtype)


def _descriptor(launch: LaunchSpec, a: ArgSpec, view: torch.Tensor) -> Any:
    """A TMA descriptor argument, rebuilt around its rebuilt tensor (``tilelens.core.kernel.descriptors``)."""
    from tilelens.core.kernel import descriptors

    try:
        return descriptors.rebuild(view, dict(a.value["descriptor"]))
    except (ValueError, KeyError, TypeError, AssertionError) as exc:
        raise ReplayFailure(
            f"launch {launch.id}: argument {a.name} (a TMA descriptor) cannot be rebuilt: {exc}"
        ) from None


_TL_PREFIX = "triton.language."


def decode_value(launch: LaunchSpec, name: str, value: Any) -> Any:
    """A scalar, constexpr or option as recorded; refuses values that were only kept as their ``repr``."""
    if isinstance(value, list):
        return tuple(decode_value(launch, name, v) for v in value)
    if not isinstance(value, dict):
        return value
    # "$float"/"$repr" since TileLens writes docs/sql.md's tags everywhere; "float"/"repr" in older histories.
    for tag in ("float", "$float"):
        if set(value) == {tag}:
            return float(value[tag])
    if "gluon_layout" in value:
        return _gluon_layout(launch, name, value)
    for tag in ("repr", "$repr"):
        if tag in value:
            text = str(value[tag])
            dtype = _triton_dtype(text)
            if dtype is not None:
                return dtype
            raise ReplayFailure(
                f"launch {launch.id}: argument {name} was recorded only as {text}, which cannot be rebuilt"
            )
    return {k: decode_value(launch, name, v) for k, v in value.items()}


def _triton_dtype(text: str) -> Any:
    """``tl.float16`` and friends are recorded as their repr; map it back without evaluating anything."""
    if not text.startswith(_TL_PREFIX):
        return None
    import triton.language as tl

    attr = getattr(tl, text.removeprefix(_TL_PREFIX), None)
    return attr if isinstance(attr, tl.dtype) else None


def _gluon_layout(launch: LaunchSpec, name: str, value: dict[str, Any]) -> Any:
    from tilelens.core.kernel.layouts import LayoutDecodeError, decode

    try:
        return decode(value)
    except (LayoutDecodeError, TypeError, AssertionError) as exc:
        raise ReplayFailure(
            f"launch {launch.id}: argument {name} (a Gluon layout) cannot be rebuilt: {exc}"
        ) from None


def decode_options(launch: LaunchSpec) -> dict[str, Any]:
    return {k: decode_value(launch, k, v) for k, v in launch.options.items()}
