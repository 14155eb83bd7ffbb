"""The recording as a sink: launches written in order before they return, failures never swallowed."""

from __future__ import annotations

import pytest
import torch

from tests import kernels
from tilelens.core import compat
from tilelens.core.recording.recording import Recording


class FakeHistory:
    """Stands in for History: records what was written and can be told to fail."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.launches: list[int] = []
        self.events: list[tuple[str, int | None]] = []
        self.finished: tuple[str, int | None] | None = None
        self.fail_at = fail_at

    def begin_run(self, info):
        return 1

    def write_launch(self, run_id, rec):
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


def test_each_launch_is_written_before_it_returns_in_order():
    history = FakeHistory()
    seen = []
    with Recording(history=history) as rec:
        rec.on_launch = lambda record, launch_id: seen.append((record.seq, launch_id))
        for i in range(5):
            _launch()
            assert history.launches == list(range(i + 1))
    assert rec.launch_ids == [100 + i for i in range(5)]
    assert seen == [(i, 100 + i) for i in range(5)]
    assert history.finished == ("ok", None)


def test_autotune_event_gets_the_id_of_its_launch():
    history = FakeHistory()
    kernel = kernels.make_autotuned()
    x, out = torch.randn(100), torch.empty(100)
    with Recording(history=history):
        _launch()
        kernel[kernels.autotuned_grid(100)](x, out, 100)
    assert history.events == [("(100, 'torch.float32', 'torch.float32')", 101)]


def test_a_failed_write_is_raised_in_the_program():
    history = FakeHistory(fail_at=1)
    with pytest.raises(OSError, match="disk full"), Recording(history=history):
        for _ in range(5):
            _launch()
    assert history.launches == [0]
    assert history.finished is not None and history.finished[0] == "failed"


def test_paused_launches_are_not_recorded():
    history = FakeHistory()
    with Recording(history=history) as rec:
        _launch()
        stock = compat.InterpretedFunction(kernels.add_kernel.fn)
        x, y, out = torch.randn(64), torch.randn(64), torch.empty(64)
        with rec.paused():
            stock[(1,)](x, y, out, 64, BLOCK=64)  # Triton's own interpreter, untouched and unrecorded
        assert torch.equal(out, x + y)
        assert history.launches == [0]
        stock[(1,)](x, y, out, 64, BLOCK=64)  # recorded again once the pause ends
    assert history.launches == [0, 1]
