"""Host-side TMA tensor descriptors as launch arguments: recorded as their tensor plus the box, rebuilt for
replay.

A descriptor argument (Triton's ``triton.tools.tensor_descriptor.TensorDescriptor`` or Gluon's
``gluon.nvidia.hopper.TensorDescriptor``) is recorded like its tensor (kind ``tensor``: dtype, geometry,
before and after snapshots) with ``value = {"descriptor": ...}`` holding what the tensor does not: the
descriptor's own shape and strides, its block shape, padding and (Gluon) shared layout. Replay rebuilds the
tensor as any other, then the same descriptor class around it. Nothing is evaluated: the class comes from a
fixed pair, the layout from ``gluon.layouts.decode``'s allow-list.
"""

from __future__ import annotations

from typing import Any

TRITON, GLUON = "triton", "gluon"


def kind_of(value: Any) -> str | None:
    """``"gluon"`` or ``"triton"`` for a host descriptor, else None."""
    if not (hasattr(value, "base") and hasattr(value, "block_shape") and hasattr(value, "strides")):
        return None
    module = type(value).__module__
    if module.startswith("triton.experimental.gluon"):
        return GLUON
    if module.startswith("triton.tools"):
        return TRITON
    return None


def describe(value: Any, encode: Any) -> dict[str, Any]:
    """The JSON ``value`` of a descriptor argument (``encode`` turns a layout into JSON)."""
    out: dict[str, Any] = {
        "kind": kind_of(value),
        "class": type(value).__name__,
        "shape": [int(s) for s in value.shape],
        "strides": [int(s) for s in value.strides],
        "block_shape": [int(b) for b in value.block_shape],
        "padding": str(getattr(value, "padding", "zero")),
    }
    if getattr(value, "round_f32_to_tf32", False):
        out["round_f32_to_tf32"] = True
    layout = getattr(value, "layout", None)
    if layout is not None:
        out["layout"] = encode(layout)
    return {"descriptor": out}


class DescriptorError(ValueError):
    pass


def rebuild(tensor: Any, recorded: dict[str, Any]) -> Any:
    """The recorded descriptor around ``tensor`` (the rebuilt base)."""
    kind, name = recorded.get("kind"), recorded.get("class")
    common = dict(
        shape=list(recorded["shape"]),
        strides=list(recorded["strides"]),
        block_shape=list(recorded["block_shape"]),
        padding=recorded.get("padding", "zero"),
    )
    if recorded.get("round_f32_to_tf32"):
        common["round_f32_to_tf32"] = True
    if kind == GLUON and name == "TensorDescriptor":
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        from tilelens.core.kernel.layouts import decode

        return TensorDescriptor(tensor, layout=decode(recorded["layout"]), **common)
    if kind == TRITON and name == "TensorDescriptor":
        from triton.tools.tensor_descriptor import TensorDescriptor as TritonDescriptor

        return TritonDescriptor(tensor, **common)
    raise DescriptorError(f"a {kind} {name} descriptor cannot be rebuilt")
