"""The packed form of a templated launch (``launch_pack``): what the compiled launcher queues instead of marshal.

The writer process must read exactly what marshal would have given it, value by value and type by type, and
the C++ encoder (``native_capture.cpp``'s ``pack_flat``) must write the reference encoder's bytes."""

from __future__ import annotations

import marshal
import math
import random
import struct
from typing import Any

import pytest

from tilelens.core import launch_pack


def _random_value(rng: random.Random) -> Any:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.random() < 0.5
    if kind == 1:  # every width, both signs, up to the int64 limits
        bits = rng.randrange(1, 64)
        return rng.choice((1, -1)) * rng.getrandbits(bits)
    if kind == 2:
        # the int64 limits, and both sides of one 30-bit digit (the compiled module reads one-digit ints from
        # their layout, larger ones through CPython's conversion)
        return rng.choice(
            (
                -(2**63),
                2**63 - 1,
                0,
                -1,
                2**31,
                -(2**31) - 1,
                2**47 + 4096,
                2**30 - 1,
                -(2**30) + 1,
                2**30,
                -(2**30),
            )
        )
    if kind == 3:
        return struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]  # any bits, NaNs included
    if kind == 4:
        return rng.choice((0.0, -0.0, math.inf, -math.inf, math.nan, 1e-308, 5e-324))
    return rng.uniform(-1e6, 1e6)


def _item(rng: random.Random, count: int) -> tuple[Any, ...]:
    grid = (rng.randrange(1, 2**31), rng.randrange(1, 65536), rng.randrange(1, 65536))
    values = [_random_value(rng) for _ in range(count)]
    return (
        "m",
        rng.randrange(2**40),
        rng.randrange(4096),
        1.7e9 + rng.random(),
        rng.random() * 1e-3,
        grid,
        values,
    )


def _same(a: Any, b: Any) -> bool:
    """Equal value by value and type by type; floats by their bits (NaN payloads, -0.0)."""
    if type(a) is not type(b):
        return False
    if type(a) in (tuple, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is float:
        return struct.pack("<d", a) == struct.pack("<d", b)
    return bool(a == b)


def test_a_packed_item_reads_back_as_its_marshal_round_trip() -> None:
    rng = random.Random(15)
    for count in [0, 1, 2, 3, 7, 16, 40, 300] * 30:
        item = _item(rng, count)
        packed = launch_pack.pack(*item[1:])
        assert packed is not None and packed[0] == launch_pack.MARK
        got = launch_pack.loads(packed)
        assert _same(got, marshal.loads(marshal.dumps(item, 2)))
        assert _same(got, item)


def test_values_the_packed_form_does_not_take_are_left_to_marshal() -> None:
    base = ("m", 5, 2, 1.5, 0.25, (1, 1, 1), [1, 2.0, True])
    assert launch_pack.pack(*base[1:]) is not None

    class Int(int):
        pass

    for values in ([1, "text"], [None], [2**63], [-(2**63) - 1], [Int(3)], (1, 2)):
        assert launch_pack.pack(5, 2, 1.5, 0.25, (1, 1, 1), values) is None  # type: ignore[arg-type]
    assert launch_pack.pack(5, 2, 1.5, 0.25, (1, 1), [1]) is None  # type: ignore[arg-type]
    assert launch_pack.pack(5, 2, 1, 0.25, (1, 1, 1), [1]) is None  # an int start time
    assert launch_pack.pack(2**63, 2, 1.5, 0.25, (1, 1, 1), [1]) is None
    assert launch_pack.pack(5, 2, 1.5, 0.25, (1, 2**64, 1), [1]) is None


def test_marshalled_items_still_read_and_a_damaged_packed_one_is_refused() -> None:
    item = ("m", 5, 2, 1.5, 0.25, (1, 1, 1), [1, "text", None])
    assert launch_pack.loads(marshal.dumps(item, 2)) == item
    packed = launch_pack.pack(5, 2, 1.5, 0.25, (1, 1, 1), [1, 2.5, False])
    assert packed is not None
    with pytest.raises(ValueError):
        launch_pack.loads(packed + b"\x00")
    with pytest.raises(struct.error):
        launch_pack.loads(packed[:-1])


def test_the_compiled_encoder_writes_the_reference_bytes(native_module: Any) -> None:
    rng = random.Random(1515)
    for count in [0, 1, 5, 16, 64] * 200:
        item = _item(rng, count)
        assert native_module.pack_flat(*item[1:]) == launch_pack.pack(*item[1:])

    class Int(int):
        pass

    class Float(float):
        pass

    refused = [
        (5, 2, 1.5, 0.25, (1, 1, 1), [1, "text"]),
        (5, 2, 1.5, 0.25, (1, 1, 1), [None]),
        (5, 2, 1.5, 0.25, (1, 1, 1), [2**63]),
        (5, 2, 1.5, 0.25, (1, 1, 1), [-(2**63) - 1]),
        (5, 2, 1.5, 0.25, (1, 1, 1), [Int(3)]),
        (5, 2, 1.5, 0.25, (1, 1, 1), [Float(3.0)]),
        (5, 2, 1.5, 0.25, (1, 1, 1), (1, 2)),
        (5, 2, 1.5, 0.25, (1, 1), [1]),
        (5, 2, 1, 0.25, (1, 1, 1), [1]),
        (2**64, 2, 1.5, 0.25, (1, 1, 1), [1]),
        (5, 2, 1.5, 0.25, (1, -(2**70), 1), [1]),
    ]
    for args in refused:
        assert native_module.pack_flat(*args) is None
        assert launch_pack.pack(*args) is None  # type: ignore[arg-type]


def test_a_batch_reads_back_as_its_items_in_order_and_a_damaged_one_is_refused() -> None:
    rng = random.Random(1516)
    items = [_item(rng, count) for count in (0, 3, 16, 1, 40)]
    packed = [launch_pack.pack(*item[1:]) for item in items]
    assert all(p is not None for p in packed)
    data = launch_pack.batch(packed)  # type: ignore[arg-type]
    assert data[0] == launch_pack.BATCH_MARK and launch_pack.launch_count(data) == 5
    assert launch_pack.split_batch(data) == packed
    marshalled = marshal.dumps(("l", 9, 1, ()), 2)
    decoded = launch_pack.decode_items([("k", 1), data, marshalled, packed[0]])
    assert decoded[0] == ("k", 1) and decoded[6] == ("l", 9, 1, ())
    assert all(_same(got, item) for got, item in zip(decoded[1:6], items)) and _same(decoded[7], items[0])
    assert launch_pack.launch_count(marshalled) == 1 and launch_pack.launch_count(packed[1]) == 1  # type: ignore[arg-type]
    for damaged in (data + b"\x00", data[:-1]):  # a byte past its last item; its last item cut short
        with pytest.raises((ValueError, struct.error)):
            launch_pack.loads_batch(damaged)
    wrong_count = data[:1] + launch_pack.BATCH_HEAD.pack(6) + data[5:]
    with pytest.raises((ValueError, IndexError, struct.error)):
        launch_pack.loads_batch(wrong_count)


def test_the_compiled_batch_writes_the_reference_bytes(native_module: Any) -> None:
    """``LaunchBatch`` (what the launcher packs steady launches into) writes ``launch_pack.batch`` of the
    reference encoder's items, refuses what ``pack`` refuses, and is empty again once sealed."""
    rng = random.Random(1517)
    batch = native_module.LaunchBatch()
    sealed: list[bytes] = []
    counted = native_module.Counter(1)
    assert batch.seal(sealed.append, counted) is False and sealed == [] and batch.nbytes == 0
    for round_ in range(40):
        items = [_item(rng, count) for count in rng.sample([0, 1, 2, 5, 16, 64, 300], 4)]
        for item in items:
            assert batch.add(*item[1:]) is True
        assert batch.add(5, 2, 1.5, 0.25, (1, 1, 1), [1, "text"]) is False
        assert batch.add(5, 2, 1.5, 0.25, (1, 1, 1), [2**63]) is False
        assert batch.launches == 4
        expected = launch_pack.batch([launch_pack.pack(*item[1:]) for item in items])  # type: ignore[misc]
        assert batch.nbytes == len(expected)
        assert batch.seal(sealed.append, counted) is True
        assert sealed[-1] == expected and batch.launches == 0 and batch.nbytes == 0
        assert repr(counted) == f"count({round_ + 2})"  # one queued item a seal
