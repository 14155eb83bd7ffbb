"""Gluon layouts in the simulator: the layouts of results, and layouts as recorded JSON values.

A Gluon layout says where a value lives on the GPU (which thread holds which element), never what the value
is, so the simulator computes every value as Triton's interpreter does and only carries layouts along for the
kernel's own use: kernel code reads ``x.type.layout`` (``gl.zeros_like``, ``gl.SliceLayout(1,
acc.type.layout)``) and Gluon's own checks compare layouts. Results get the layout the compiler gives them
where the rule is simple and documented (a reduction gives ``SliceLayout(axis, L)``, ``expand_dims`` of a
slice gives its parent, a permuted ``BlockedLayout`` is permuted field by field); where the compiler would
infer a linear layout (reshape, join, split, permutes of other layouts) the result has ``AutoLayout``, which
every Gluon check accepts. So the simulator never rejects a kernel for a layout it failed to infer; the price
is that a kernel whose layouts would not compile can run here.

Layouts are also launch arguments (``layout: gl.constexpr``). They are recorded as JSON (class, module and
fields) and rebuilt for replay from an allow-list: only dataclasses defined in Triton's Gluon language modules
are ever constructed, so nothing recorded is executed.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from tilelens.core import compat

TAG = "gluon_layout"


def auto() -> Any:
    return compat.gluon_language().AutoLayout()


def is_auto(layout: Any) -> bool:
    gl = compat.gluon_language()
    return isinstance(layout, (gl.AutoLayout, getattr(gl, "CoalescedLayout", gl.AutoLayout)))


def reduced(layout: Any, axis: int) -> Any:
    """The layout of a reduction along ``axis`` (Gluon: ``SliceLayout(axis, parent)``)."""
    if layout is None or is_auto(layout):
        return auto() if layout is None else layout
    return compat.gluon_language().SliceLayout(axis, layout)


def expanded(layout: Any, axis: int) -> Any:
    """The layout of ``expand_dims(x, axis)``: a slice along ``axis`` gives back its parent."""
    gl = compat.gluon_language()
    if isinstance(layout, gl.SliceLayout) and layout.dim == axis:
        return layout.parent
    return layout if is_auto(layout) else auto()


def permuted(layout: Any, dims: list[int]) -> Any:
    """The layout of ``permute(x, dims)``: a blocked layout's fields permuted; others left to the compiler."""
    gl = compat.gluon_language()
    if not isinstance(layout, gl.BlockedLayout) or layout.cga_layout:
        return layout if is_auto(layout) else auto()
    return gl.BlockedLayout(
        size_per_thread=[layout.size_per_thread[d] for d in dims],
        threads_per_warp=[layout.threads_per_warp[d] for d in dims],
        warps_per_cta=[layout.warps_per_cta[d] for d in dims],
        order=[dims.index(o) for o in layout.order],
    )


def shared_permuted(layout: Any, order: list[int]) -> Any:
    """The shared layout of a permuted shared-memory descriptor (what ``memdesc_trans`` gives)."""
    gl = compat.gluon_language()
    if isinstance(layout, gl.NVMMASharedLayout) and len(order) == 2 and list(order) == [1, 0]:
        return dataclasses.replace(layout, transposed=not layout.transposed)
    if isinstance(layout, gl.SwizzledSharedLayout) and len(layout.order) == len(order):
        return dataclasses.replace(layout, order=[list(order).index(o) for o in layout.order])
    return layout


# ---------------------------------------------------------------------------------------------------------
# Layouts as recorded values

_MODULE_PREFIX = "triton.experimental.gluon."


def is_gluon_layout(value: Any) -> bool:
    cls = type(value)
    return dataclasses.is_dataclass(value) and cls.__module__.startswith(_MODULE_PREFIX + "language")


def encode(value: Any, encode_field: Any) -> dict[str, Any]:
    """A Gluon layout as JSON: its class, its module and its fields (each encoded by ``encode_field``)."""
    cls = type(value)
    fields = {f.name: encode_field(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return {TAG: cls.__name__, "module": cls.__module__, "fields": fields}


class LayoutDecodeError(ValueError):
    pass


def decode(value: dict[str, Any]) -> Any:
    """Rebuild a recorded layout; only dataclasses of Triton's Gluon language modules are constructed."""
    name, module_name = str(value.get(TAG)), str(value.get("module", ""))
    if not module_name.startswith(_MODULE_PREFIX + "language"):
        raise LayoutDecodeError(f"{module_name}.{name} is not a Gluon layout")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise LayoutDecodeError(
            f"module {module_name} of layout {name} does not exist in this Triton"
        ) from None
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module_name):
        raise LayoutDecodeError(f"{module_name} has no layout class {name}")
    fields = {k: _decode_field(v) for k, v in dict(value.get("fields", {})).items()}
    init = {f.name for f in dataclasses.fields(cls) if f.init}
    try:
        return cls(**fields)
    except TypeError:
        pass
    # A subclass whose __init__ takes fewer arguments (MBarrierLayout takes only cga_layout).
    import inspect

    accepted = set(inspect.signature(cls).parameters)
    try:
        layout = cls(**{k: v for k, v in fields.items() if k in accepted})
    except TypeError as exc:
        raise LayoutDecodeError(f"layout {name} cannot be rebuilt from {sorted(init)}: {exc}") from None
    if any(getattr(layout, k) != v for k, v in fields.items() if k in init):
        raise LayoutDecodeError(f"layout {name} does not rebuild to its recorded fields")
    return layout


def _decode_field(value: Any) -> Any:
    if isinstance(value, dict) and TAG in value:
        return decode(value)
    if isinstance(value, list):
        return [_decode_field(v) for v in value]
    return value
