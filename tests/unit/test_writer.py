"""The background writer keeps launch order, drains on exit, and never drops a failure."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from tests import kernels
from tilelens.core import compat
from tilelens.core.recorder import Recording
from tilelens.core.writer import BackgroundWriter


class FakeHistory:
    """Stands in for History: records what was written, slowly, and can be told to fail."""

    def __init__(self, fail_at: int | None = None, delay: float = 0.0) -> None:
        self.launches: list[int] = []
        self.events: list[tuple[str, int | None]] = []
        self.finished: tuple[str, int | None] | None = None
        self.fail_at = fail_at
        self.delay = delay
        self.writer_threads: set[str] = set()

    def begin_run(self, info):
        return 1

    def write_launch(self, run_id, rec):
        time.sleep(self.delay)
        self.writer_threads.add(threading.current_thread().name)
        if self.fail_at is not None and rec.seq == self.fail_at:
            raise OSError("disk full")
        self.launches.append(rec.seq)
        return 100 + rec.seq

    def write_autotune_event(self, run_id, ev, launch_id=None):
        self.events.append((ev.tuning_key, launch_id))
        return 1

    def finish_run(self, run_id, status, exit_code=None):
        self.finished = (status, exit_code)

    def close(self):
        pass


def _launch(n=64):
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    kernels.add_kernel[(1,)](x, y, out, n, BLOCK=64)
    assert torch.equal(out, x + y)


def test_writes_are_in_order_off_the_program_thread_and_drained_on_exit():
    history = FakeHistory(delay=0.01)
    with Recording(history=history) as rec:
        for _ in range(12):
            _launch()
    assert history.launches == list(range(12))
    assert rec.launch_ids == [100 + i for i in range(12)]
    assert history.writer_threads == {"tilelens-writer"}
    assert history.finished == ("ok", None)


def test_autotune_event_gets_the_id_of_its_launch():
    history = FakeHistory(delay=0.01)
    kernel = kernels.make_autotuned()
    x, out = torch.randn(100), torch.empty(100)
    with Recording(history=history):
        _launch()
        kernel[kernels.autotuned_grid(100)](x, out, 100)
    assert history.events == [("(100, 'torch.float32', 'torch.float32')", 101)]


def test_a_failed_write_is_raised_in_the_program():
    history = FakeHistory(fail_at=1)
    with pytest.raises(RuntimeError, match="could not write to the history: disk full"):  # noqa: SIM117
        with Recording(history=history):
            for _ in range(5):
                _launch()
                time.sleep(0.01)
    assert history.launches == [0]
    assert history.finished is not None and history.finished[0] == "failed"


def test_writer_close_raises_the_first_failure():
    writer = BackgroundWriter()
    writer.submit(lambda: (_ for _ in ()).throw(ValueError("first")))
    writer.submit(lambda: None)
    with pytest.raises(RuntimeError, match="first"):
        writer.close()


def test_flush_waits_for_queued_writes_and_paused_launches_are_not_recorded():
    history = FakeHistory(delay=0.02)
    with Recording(history=history) as rec:
        _launch()
        _launch()
        rec.flush()
        assert history.launches == [0, 1]
        stock = compat.InterpretedFunction(kernels.add_kernel.fn)
        x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
        with rec.paused():
            stock[(1,)](x, y, out, 64, BLOCK=64)  # Triton's own interpreter, untouched and unrecorded
        assert torch.equal(out, x + y)
        stock[(1,)](x, y, out, 64, BLOCK=64)  # recorded again once the pause ends
    assert history.launches == [0, 1, 2]
