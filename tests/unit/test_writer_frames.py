"""The frames the program's feeder sends its writer process (``writer_child.frame_parts``, ``write_all``).

The feeder hands the pipe the queued bytes items as they are (``os.writev``), each other item marshalled on its
own, so the program's GIL is not held while its queue is copied into one marshalled list. These tests pin the
format's round trip, that nothing queued is copied, what happens to an item marshal refuses, and short writes.
"""

from __future__ import annotations

import io
import marshal
import os
from typing import Any

import pytest

from tilelens.core.compiled.writer import child as writer_child
from tilelens.core.compiled.writer import process as writer_process
from tilelens.core.compiled.writer.process import write_all


def _items() -> list[Any]:
    templated = marshal.dumps(("m", 4, 2, 1.5, 0.25, (3, 1, 1), [7, -1, 2.0]), 2)  # as submit_flat queues
    marshalled = marshal.dumps(("l", 5, 1, ("raw", (1, 2.5, None))), 2)
    return [
        ("k", 1, ("ident",), ((0, "x", False, "fp32"),)),
        templated,
        ("t", 2, 1, ("body",)),
        marshalled,
        ("f",),
    ]


def test_a_parts_frame_reads_back_as_the_list_it_was_made_of_and_shares_the_queued_bytes() -> None:
    items = _items()
    parts, refused = writer_child.frame_parts(items)
    assert refused == []
    assert len(parts) == 1 + 2 * len(items)
    assert parts[4] is items[1] and parts[8] is items[3]  # the queued bytes themselves, not copies
    data = b"".join(parts)
    (size,) = writer_child.HEADER.unpack_from(data)
    assert size & writer_child.PARTS and size & ~writer_child.PARTS == len(data) - writer_child.HEADER.size
    stream = io.BytesIO(data + writer_child.frame([("x",)]))
    assert writer_child.read_frame(stream) == items
    assert writer_child.read_frame(stream) == [("x",)]  # a marshalled frame after it reads as before
    assert writer_child.read_frame(stream) is None
    assert marshal.loads(items[1]) == ("m", 4, 2, 1.5, 0.25, (3, 1, 1), [7, -1, 2.0])


def test_an_item_marshal_refuses_is_left_out_and_named_the_rest_keep_their_order() -> None:
    items = _items()
    odd = ("e", object(), None)
    parts, refused = writer_child.frame_parts(items[:2] + [odd] + items[2:])
    assert [(item is odd, type(exc)) for item, exc in refused] == [(True, ValueError)]
    assert writer_child.read_frame(io.BytesIO(b"".join(parts))) == items


def test_an_empty_queue_and_an_empty_bytes_item_frame_as_themselves() -> None:
    assert writer_child.read_frame(io.BytesIO(b"".join(writer_child.frame_parts([])[0]))) == []
    assert writer_child.read_frame(io.BytesIO(b"".join(writer_child.frame_parts([b""])[0]))) == [b""]


def test_a_cut_frame_is_the_end_of_input_and_a_part_past_its_frame_is_refused() -> None:
    data = b"".join(writer_child.frame_parts(_items())[0])
    assert writer_child.read_frame(io.BytesIO(data[:-1])) is None
    head = writer_child.HEADER.pack(writer_child.PART.size | writer_child.PARTS)
    with pytest.raises(ValueError, match="runs past its frame"):
        writer_child.read_frame(io.BytesIO(head + writer_child.PART.pack(9)))


def test_write_all_goes_on_after_short_writes_and_writes_every_byte_in_order() -> None:
    parts = [b"abc", b"", b"defghij", bytes(range(256)) * 5, b"k"]
    out = bytearray()
    calls: list[int] = []

    def short(fd: int, buffers: list[Any]) -> int:  # at most 7 bytes a call, cutting buffers anywhere
        data = b"".join(bytes(b) for b in buffers)[:7]
        out.extend(data)
        calls.append(len(buffers))
        return len(data)

    write_all(3, parts, short)
    assert bytes(out) == b"".join(parts)
    assert len(calls) == -(-len(b"".join(parts)) // 7)


def test_write_all_splits_more_buffers_than_one_call_takes_and_refuses_a_write_of_nothing() -> None:
    parts = [bytes([i % 256]) for i in range(2500)]
    seen: list[int] = []

    def whole(fd: int, buffers: list[Any]) -> int:
        seen.append(len(buffers))
        return sum(len(b) for b in buffers)

    write_all(3, parts, whole)
    most = writer_process._IOV_MAX  # the system's IOV_MAX, at most 1024 (Linux: 1024)
    assert seen == [most] * (2500 // most) + ([2500 % most] if 2500 % most else [])
    with pytest.raises(OSError, match="took nothing"):
        write_all(3, [b"x"], lambda fd, buffers: 0)


def test_write_all_to_a_pipe_delivers_a_frame_the_reader_reads() -> None:
    read_end, write_end = os.pipe()
    try:
        write_all(write_end, writer_child.frame_parts(_items())[0])
        os.close(write_end)
        write_end = -1
        with os.fdopen(read_end, "rb") as stream:
            read_end = -1
            assert writer_child.read_frame(stream) == _items()
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)
