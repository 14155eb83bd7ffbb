"""The packed form of a templated launch on its way to the writer process: fixed-width fields, not marshal.

The compiled launcher (``native_capture.cpp``'s ``pack_flat``) queues a steady launch's item
``("m", n, template, started, duration, grid, values)`` in this form when every value fits, and marshals it
otherwise. Packing is a copy of machine words; marshal walks every value (a storage pointer is a 4-digit
``long`` to it) and grows its buffer as it goes: on the stand-in step that was ~3,400 instructions a launch,
the largest single part of what recording added to a launch (issue 15).

Layout (little-endian)::

    MARK (1 byte) | n, template: int64 | started, duration: float64 | grid: 3 x int64 | count: uint32
    | count format codes, one byte each: 'q' (int64), 'd' (float64), '?' (bool) | the values, packed so

Steady launches of the compiled launcher travel in batches (``native_capture.cpp``'s ``Batch``: one queued item
for many launches, so a launch makes no object on the program's side)::

    BATCH_MARK (1 byte) | count: uint32 | count packed items, one after another

Invariants: :func:`loads` of a packed item equals ``marshal.loads(marshal.dumps(item, 2))`` element by
element and type by type (``values`` comes back a list, ``grid`` a tuple; a float keeps its exact bits, NaN
payloads and -0.0 included); :func:`pack` (the reference encoder, in Python) and the C++ encoder write the
same bytes; an item with any other value (a str, None, an int past 64 bits, a subclass) is not packed.
:data:`MARK` is no marshal type code, so :func:`loads` tells the two forms apart by the first byte. Reading
a packed item runs no code and builds only ints, floats, bools, a tuple and a list. A batch's items are
self-delimiting (a packed item's size follows from its count and codes); :func:`decode_items` reads a batch into its
items in order and refuses one whose size or count does not add up.
"""

from __future__ import annotations

import marshal
import struct
from typing import Any

MARK = 0  # the first byte of a packed item; marshal's type codes are printable ASCII (| 0x80 for a ref)
BATCH_MARK = 1  # the first byte of a batch of packed items (no marshal type code either)
HEAD = struct.Struct("<qqddqqqI")  # n, template, started, duration, grid (3), count
BATCH_HEAD = struct.Struct("<I")  # a batch's count, after BATCH_MARK
_structs: dict[bytes, struct.Struct] = {}


def _load_at(data: bytes, start: int) -> tuple[tuple[Any, ...], int]:
    """The packed item at ``start`` of ``data`` (``data[start] == MARK``) and where it ends."""
    n, template, started, duration, g0, g1, g2, count = HEAD.unpack_from(data, start + 1)
    at = start + 1 + HEAD.size
    codes = data[at : at + count]
    layout = _structs.get(codes)
    if layout is None:
        if len(_structs) > 4096:
            _structs.clear()
        layout = _structs[codes] = struct.Struct("<" + codes.decode("ascii"))
    values = list(layout.unpack_from(data, at + count))
    return ("m", n, template, started, duration, (g0, g1, g2), values), at + count + layout.size


def loads(data: bytes) -> Any:
    """A queued launch item, packed or marshalled (not a batch: :func:`decode_items`)."""
    if not data or data[0] != MARK:
        return marshal.loads(data)
    item, end = _load_at(data, 0)
    if end != len(data):
        raise ValueError(f"a packed launch of {len(data)} bytes holds {end}")
    return item


def loads_batch(data: bytes) -> list[Any]:
    """The launch items of a batch, in order."""
    (count,) = BATCH_HEAD.unpack_from(data, 1)
    items: list[Any] = []
    at = 1 + BATCH_HEAD.size
    for _ in range(count):
        if data[at] != MARK:
            raise ValueError(f"item {len(items)} of a batch is not packed")
        item, at = _load_at(data, at)
        items.append(item)
    if at != len(data):
        raise ValueError(f"a batch of {count} launches in {len(data)} bytes ends at {at}")
    return items


def decode_items(items: list[Any]) -> list[Any]:
    """The writer's queued items as the writer reads them: bytes decoded (a batch into its launches, in
    order), anything else as it is."""
    out: list[Any] = []
    for item in items:
        if type(item) is not bytes:
            out.append(item)
        elif item and item[0] == BATCH_MARK:
            out.extend(loads_batch(item))
        else:
            out.append(loads(item))
    return out


def launch_count(data: bytes) -> int:
    """How many launches a queued bytes item holds: a batch's count, else 1."""
    if data and data[0] == BATCH_MARK:
        count: int = BATCH_HEAD.unpack_from(data, 1)[0]
        return count
    return 1


def split_batch(data: bytes) -> list[bytes]:
    """A batch's packed items, each as :func:`pack` would make it (for tests and diagnostics)."""
    (count,) = BATCH_HEAD.unpack_from(data, 1)
    out: list[bytes] = []
    at = 1 + BATCH_HEAD.size
    for _ in range(count):
        _, end = _load_at(data, at)
        out.append(data[at:end])
        at = end
    return out


def batch(packed: list[bytes]) -> bytes:
    """The batch of ``packed`` items (the reference encoder of the compiled ``LaunchBatch``'s bytes)."""
    return bytes((BATCH_MARK,)) + BATCH_HEAD.pack(len(packed)) + b"".join(packed)


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
