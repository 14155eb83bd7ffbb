"""Host-side Gluon TMA descriptors (``gluon.nvidia.hopper.TensorDescriptor``) as launch arguments.

Triton's interpreter copies device tensors to the host before a launch (and back after) and turns Triton's own
``TensorDescriptor`` into a device-side descriptor, but knows nothing of Gluon's: its tensor would stay on the
device, and the kernel would get a Python object where it expects a descriptor value. For Gluon launches the
interpreter's host copy and copy-back see each descriptor's tensor (the descriptor is rebuilt around the host
copy), and argument conversion turns the descriptor into Gluon's ``tensor_descriptor`` value whose handle is
the simulator's ``SimDescriptor``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tilelens.core import compat
from tilelens.core.engine.gluon import language
from tilelens.core.engine.gluon.nvidia import SimDescriptor


def is_host_descriptor(value: Any) -> bool:
    classes = compat.gluon_host_descriptor_classes()
    return bool(classes) and isinstance(value, classes)


def _bases(values: Any) -> Any:
    if is_host_descriptor(values):
        return values.base
    if isinstance(values, tuple) and not hasattr(values, "_fields"):
        return tuple(_bases(v) for v in values)
    if isinstance(values, list):
        return [_bases(v) for v in values]
    if isinstance(values, dict):
        return {k: _bases(v) for k, v in values.items()}
    return values


def _rewrap(original: Any, host: Any) -> Any:
    if is_host_descriptor(original):
        desc = copy.copy(original)  # no __post_init__: the host copy is the same tensor, checked already
        desc.base = host
        return desc
    if isinstance(original, tuple) and not hasattr(original, "_fields"):
        return tuple(_rewrap(o, h) for o, h in zip(original, host))
    return host


def init_args_hst(original: Callable[..., Any]) -> Callable[..., Any]:
    """``GridExecutor._init_args_hst`` that also copies a Gluon descriptor's tensor to the host."""

    def _init_args_hst(self: Any, args_dev: Any, kwargs: Any) -> Any:
        args_hst, kwargs_hst = original(self, _bases(list(args_dev)), _bases(dict(kwargs)))
        args_hst = [_rewrap(o, h) for o, h in zip(args_dev, args_hst)]
        kwargs_hst = {k: _rewrap(kwargs[k], v) for k, v in kwargs_hst.items()}
        return args_hst, kwargs_hst

    return _init_args_hst


def restore_args_dev(original: Callable[..., Any]) -> Callable[..., Any]:
    """``GridExecutor._restore_args_dev`` that also copies a Gluon descriptor's tensor back to the device."""

    def _restore_args_dev(self: Any, args_dev: Any, args_hst: Any, kwargs: Any, kwargs_hst: Any) -> Any:
        return original(
            self,
            _bases(list(args_dev)),
            _bases(list(args_hst)),
            _bases(dict(kwargs)),
            _bases(dict(kwargs_hst)),
        )

    return _restore_args_dev


def implicit_cvt(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The interpreter's argument conversion, plus Gluon host descriptors to ``tensor_descriptor`` values."""

    def _implicit_cvt(arg: Any) -> Any:
        if not is_host_descriptor(arg):
            return original(arg)
        ptr = original(arg.base)
        element = ptr.type.element_ty
        handle = SimDescriptor(
            base=int(ptr.handle.data.reshape(-1)[0]),
            element=element,
            shape=[int(s) for s in arg.shape],
            strides=[int(s) for s in arg.strides],
            block_shape=[int(b) for b in arg.block_shape],
            padding=str(getattr(arg, "padding", "zero")),
        )
        semantic = language.ACTIVE.semantic
        tl = compat.tl
        shape = [semantic.make_scalar(int(s), tl.int32) for s in arg.shape]
        strides = [semantic.make_scalar(int(s), tl.int64) for s in arg.strides]
        block_type = tl.block_type(element, [int(b) for b in arg.block_shape])
        return compat.gluon_descriptor_value(handle, shape, strides, block_type, arg.layout)

    return _implicit_cvt
