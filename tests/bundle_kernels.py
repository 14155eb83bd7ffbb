"""Kernels whose bundles tests/unit/test_bundle.py checks: a constexpr global, a jit helper imported under
another name, a module alias, a dtype global, and a global the bundle cannot hold."""

import triton
import triton.language as language_alias
import triton.language as tl

from tests.kernels import add_kernel as imported_add  # noqa: F401 - a jit function the kernels do not call

SCALE: tl.constexpr = tl.constexpr(3)
OFFSET = 0.5
DTYPE = tl.float32
LABEL = "x"
UNHOLDABLE = object()


@triton.jit
def _twice(x):
    return x * 2


twice_alias = _twice


@triton.jit
def bundled(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + language_alias.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(DTYPE)
    tl.store(x_ptr + offs, twice_alias(x) * SCALE + OFFSET, mask=m)


@triton.jit
def odd(x_ptr):
    if UNHOLDABLE is None:
        tl.store(x_ptr, 1.0)
