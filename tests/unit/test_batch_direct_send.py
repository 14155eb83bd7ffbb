"""The compiled launcher's batch written straight into the writer process's pipe, and the feeder's wait
without the GIL (``LaunchBatch.send``/``attach``/``idle``; ``native_capture.cpp``'s ``Batch``).

A direct send must put on the pipe exactly the parts frame the feeder would have written for that one batch,
only when nothing queued could be overtaken (an empty queue, a feeder not sending), never partly (a pipe
without room for the whole frame leaves the batch as it was), and only from the process that attached the
pipe."""

from __future__ import annotations

import contextlib
import io
import os
import random
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tilelens.core import launch_pack, writer_process
from tilelens.core.writer_child import frame_parts, read_frame

from .test_launch_pack import _item

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc").exists(), reason="Linux pipes")


@contextlib.contextmanager
def _pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    try:
        yield read_end, write_end
    finally:
        for fd in (read_end, write_end):
            with contextlib.suppress(OSError):
                os.close(fd)


def _filled(native_module: Any, seed: int, launches: int) -> tuple[Any, list[tuple[Any, ...]]]:
    rng = random.Random(seed)
    batch = native_module.LaunchBatch()
    items = [_item(rng, rng.choice([0, 3, 17])) for _ in range(launches)]
    for item in items:
        assert batch.add(*item[1:]) is True
    return batch, items


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    out = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 1 << 16):
            out += chunk
    return out


def test_a_sent_batch_is_the_parts_frame_the_feeder_would_write_and_the_batch_is_empty_after(
    native_module: Any,
) -> None:
    with _pipe() as (read_end, write_end):
        batch, items = _filled(native_module, 7, 9)
        assert batch.attach(write_end) is True
        expected = launch_pack.batch([launch_pack.pack(*item[1:]) for item in items])  # type: ignore[misc]
        assert batch.nbytes == len(expected)
        assert batch.send(deque()) is True
        assert (batch.launches, batch.nbytes, batch.sent_launches, batch.sent_batches) == (0, 0, 9, 1)
        wire = _read_all(read_end)
        assert wire == b"".join(frame_parts([expected])[0])
        assert read_frame(io.BytesIO(wire)) == [expected]
        # The buffer is reused: the next launches make the next frame; an empty batch sends nothing.
        assert batch.send(deque()) is False
        rng = random.Random(8)
        more = [_item(rng, 2) for _ in range(2)]
        for item in more:
            batch.add(*item[1:])
        assert batch.send(deque()) is True and batch.sent_batches == 2
        expected = launch_pack.batch([launch_pack.pack(*item[1:]) for item in more])  # type: ignore[misc]
        assert read_frame(io.BytesIO(_read_all(read_end))) == [expected]


def _sealed(batch: Any) -> bytes:
    out: list[bytes] = []
    assert batch.seal(out.append, iter(range(10))) is True
    return out[0]


def test_a_batch_is_not_sent_over_a_queued_item_a_sending_feeder_or_into_a_pipe_without_room(
    native_module: Any,
) -> None:
    with _pipe() as (read_end, write_end):
        batch, items = _filled(native_module, 11, 5)
        assert batch.send(deque()) is False  # no pipe attached
        assert batch.attach(write_end) is True
        assert batch.send(deque([b"queued first"])) is False  # would overtake an item queued before it
        batch.busy = True  # the feeder took the queue and is writing it
        assert batch.send(deque()) is False
        batch.busy = False
        # A pipe with less room than the frame: nothing written, the batch kept whole.
        filler = b"x" * 4096
        os.set_blocking(write_end, False)
        with contextlib.suppress(BlockingIOError):
            while True:
                os.write(write_end, filler)
        os.set_blocking(write_end, True)
        assert batch.send(deque()) is False and batch.launches == 5 and batch.sent_batches == 0
        drained = _read_all(read_end)
        assert drained and set(drained) == {ord("x")}  # only the filler: the batch wrote nothing
        assert batch.send(deque()) is True
        expected = launch_pack.batch([launch_pack.pack(*item[1:]) for item in items])  # type: ignore[misc]
        assert read_frame(io.BytesIO(_read_all(read_end))) == [expected]
        assert batch.attach(-1) is False  # detached: never again
        batch.add(*items[0][1:])
        assert batch.send(deque()) is False and batch.launches == 1
        # Each refusal counted by why (the diagnostics' figures).
        stats = batch.stats
        held = [stats[f"held_{why}"] for why in ("unattached", "queued", "busy", "full_pipe")]
        assert held == [2, 1, 1, 1]
        assert (stats["sent_batches"], stats["sent_launches"]) == (1, 5)


def test_a_pipe_whose_reader_is_gone_detaches_and_keeps_the_batch_for_the_queue(native_module: Any) -> None:
    with _pipe() as (read_end, write_end):
        batch, items = _filled(native_module, 12, 3)
        assert batch.attach(write_end) is True
        os.close(read_end)
        assert batch.send(deque()) is False  # EPIPE (Python ignores SIGPIPE)
        assert batch.launches == 3 and batch.sent_launches == 0
        expected = launch_pack.batch([launch_pack.pack(*item[1:]) for item in items])  # type: ignore[misc]
        assert _sealed(batch) == expected
        batch.add(*items[0][1:])
        assert batch.send(deque()) is False  # detached


def test_a_forked_child_never_writes_into_the_pipe_its_parent_attached(native_module: Any) -> None:
    with _pipe() as (read_end, write_end):
        batch, _ = _filled(native_module, 13, 4)
        assert batch.attach(write_end) is True
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's outcome is its exit status
            os._exit(0 if batch.send(deque()) is False and batch.launches == 4 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _read_all(read_end) == b""
        assert batch.send(deque()) is True


def _idle_in_thread(batch: Any, period: float) -> tuple[threading.Thread, list[float]]:
    returned: list[float] = []

    def wait() -> None:
        batch.idle(period)
        returned.append(time.monotonic())

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, returned


def test_idle_waits_until_woken_flagged_or_a_launch_has_waited_most_of_the_period(native_module: Any) -> None:
    batch = native_module.LaunchBatch()
    with pytest.raises(ValueError):
        batch.idle(0.0)
    # Nothing to send: idle stays (other threads run meanwhile: the GIL is released) until woken.
    thread, returned = _idle_in_thread(batch, 0.02)
    time.sleep(0.3)
    assert returned == [] and thread.is_alive()
    batch.wake()
    thread.join(5)
    assert len(returned) == 1
    # A wake before the wait is kept for it; a flag (an item queued) ends the next wait at its next look.
    batch.wake()
    batch.idle(10.0)
    batch.flag()
    started = time.monotonic()
    batch.idle(0.05)
    assert time.monotonic() - started < 1.0
    # A launch packed into the batch: idle returns once it has waited 3/4 of the period (looked at every 1/4).
    thread, returned = _idle_in_thread(batch, 0.4)
    time.sleep(0.05)
    packed_at = time.monotonic()
    batch.add(*_item(random.Random(3), 2)[1:])
    thread.join(5)
    assert len(returned) == 1 and 0.29 <= returned[0] - packed_at < 2.0
    # Still in the batch (not sealed): the next wait returns at its first look.
    started = time.monotonic()
    batch.idle(0.4)
    assert time.monotonic() - started < 0.5
    stats = batch.stats
    assert (stats["idle_woken"], stats["idle_flagged"], stats["idle_aged"]) == (2, 1, 2)


def test_a_recording_sends_full_batches_directly_and_writes_the_same_rows_as_through_the_queue(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A steady compiled recording with small batches: most go straight into the pipe, none is lost or
    reordered (the launches' rows equal those of the same program with every batch queued), and the launches
    sent directly are counted as unconfirmed until the child's report confirms them."""
    import torch

    from .test_compiled_templates import _all_rows, _recording
    from .test_native_launch import scale_kernel

    monkeypatch.setattr(writer_process, "BATCH_BYTES", 600)
    # Batches fill by size, not by age: the stand-in's launches are slow enough that the feeder would seal
    # most of them partly filled every FEED_S. (The feeder then looks every 7.5 s: a flush sends what the first
    # launch queued, the kernel's and its template's definitions, which no batch may overtake.)
    monkeypatch.setattr(writer_process, "FEED_S", 30.0)
    rows: dict[bool, list[Any]] = {}
    for direct in (True, False):
        monkeypatch.setattr(writer_process, "DIRECT_SEND", direct)
        folder = tmp_path / f"direct{int(direct)}"
        folder.mkdir()
        rec = _recording(folder)
        x = torch.arange(16, dtype=torch.float32)
        with rec:
            w = rec._writer
            assert isinstance(w, writer_process.ProcessWriter)
            for i in range(120):
                scale_kernel[(2,)](x, torch.zeros(16), 16 - i % 7, float(i), BLOCK=8)
                if i == 1:
                    rec.flush()
            sent = w._batch.sent_launches
            assert sent > 60 if direct else sent == 0
            rec.flush()
            assert w._unconfirmed == 0  # the flush's report confirmed the directly sent launches too
        assert rec.write_failure is None and len(rec.launch_ids) == 120
        rows[direct] = _all_rows(folder / "h.db", folder / "b")
    assert len(rows[True]) == 120 and rows[True] == rows[False]


def test_a_launching_program_sends_a_batch_it_fills_slowly_itself_before_the_feeder_would_wake_for_it(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch that is not full goes into the pipe from the launching thread once its oldest launch has waited
    half of FEED_S (``send_age``), so the feeder (which would take the GIL at 3/4) does not wake for it."""
    import torch

    from .test_compiled_templates import _all_rows, _recording
    from .test_native_launch import scale_kernel

    monkeypatch.setattr(writer_process, "FEED_S", 2.0)  # send_age 1.0 s; the feeder's look at 1.5 s
    rec = _recording(tmp_path)
    x = torch.arange(16, dtype=torch.float32)
    with rec:
        w = rec._writer
        assert isinstance(w, writer_process.ProcessWriter) and w._batch.send_age == 1.0
        for i in range(3):  # the kernel's and its template's definitions queued, then steady launches
            scale_kernel[(2,)](x, torch.zeros(16), 16, float(i), BLOCK=8)
        rec.flush()
        before = w._batch.stats
        scale_kernel[(2,)](x, torch.zeros(16), 16, 3.0, BLOCK=8)
        assert w._batch.launches == 1  # packed, not sent: young
        time.sleep(1.1)
        scale_kernel[(2,)](x, torch.zeros(16), 16, 4.0, BLOCK=8)
        after = w._batch.stats
        assert w._batch.launches == 0
        assert [after[k] - before[k] for k in ("sent_batches", "sent_launches")] == [1, 2]
        assert after["idle_aged"] == before["idle_aged"]  # the feeder did not wake for it
        rec.flush()
    assert rec.write_failure is None and len(rec.launch_ids) == 5
    assert len(_all_rows(tmp_path / "h.db", tmp_path / "b")) == 5
