"""The packed form of a templated launch on its way to the writer process: fixed-width fields, not marshal.

The compiled launcher (``native_capture.cpp``'s ``pack_flat``) queues a steady launch's item
``("m", n, template, started, duration, grid, values)`` in this form when every value fits, and marshals it
otherwise. Packing is a copy of machine words; marshal walks every value (a storage pointer is a 4-digit
``long`` to it) and grows its buffer as it goes: on the stand-in step that was ~3,400 instructions a launch,
the largest single part of what recording added to a launch (issue 15).

Layout (little-endian)::

    MARK (1 byte) | n, template: int64 | started, duration: float64 | grid: 3 x int64 | count: uint32
    | count format codes, one byte each: 'q' (int64), 'd' (float64), '?' (bool) | the values, packed so

Invariants: :func:`loads` of a packed item equals ``marshal.loads(marshal.dumps(item, 2))`` element by
element and type by type (``values`` comes back a list, ``grid`` a tuple; a float keeps its exact bits, NaN
payloads and -0.0 included); :func:`pack` (the reference encoder, in Python) and the C++ encoder write the
same bytes; an item with any other value (a str, None, an int past 64 bits, a subclass) is not packed.
:data:`MARK` is no marshal type code, so :func:`loads` tells the two forms apart by the first byte. Reading
a packed item runs no code and builds only ints, floats, bools, a tuple and a list.
"""

from __future__ import annotations

import marshal
import struct
from typing import Any

MARK = 0  # the first byte of a packed item; marshal's type codes are printable ASCII (| 0x80 for a ref)
HEAD = struct.Struct("<qqddqqqI")  # n, template, started, duration, grid (3), count
_structs: dict[bytes, struct.Struct] = {}


def loads(data: bytes) -> Any:
    """A queued launch item, packed or marshalled."""
    if not data or data[0] != MARK:
        return marshal.loads(data)
    n, template, started, duration, g0, g1, g2, count = HEAD.unpack_from(data, 1)
    at = 1 + HEAD.size
    codes = data[at : at + count]
    layout = _structs.get(codes)
    if layout is None:
        if len(_structs) > 4096:
            _structs.clear()
        layout = _structs[codes] = struct.Struct("<" + codes.decode("ascii"))
    values = list(layout.unpack_from(data, at + count))
    if at + count + layout.size != len(data):
        raise ValueError(f"a packed launch of {len(data)} bytes holds {at + count + layout.size}")
    return ("m", n, template, started, duration, (g0, g1, g2), values)


def pack(
    n: int, template: int, started: float, duration: float, grid: tuple[int, int, int], values: list[Any]
) -> bytes | None:
    """The packed item, or None when a value does not fit (the caller marshals it)."""
    if type(values) is not list or type(grid) is not tuple or len(grid) != 3:
        return None
    if type(started) is not float or type(duration) is not float:
        return None
    codes = bytearray()
    for v in values:
        t = type(v)
        if t is bool:
            codes += b"?"
        elif t is int:
            if not -(2**63) <= v < 2**63:
                return None
            codes += b"q"
        elif t is float:
            codes += b"d"
        else:
            return None
    for v in (n, template, *grid):
        if type(v) is not int or not -(2**63) <= v < 2**63:
            return None
    return (
        bytes((MARK,))
        + HEAD.pack(n, template, started, duration, *grid, len(values))
        + bytes(codes)
        + struct.pack("<" + codes.decode("ascii"), *values)
    )
