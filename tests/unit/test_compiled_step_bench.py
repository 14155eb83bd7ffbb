"""``benchmarks.compiled_step.interleaved``, the bench's launch-bound estimate, on the CPU stand-in step: its
recorded rounds are recorded and nothing else is (the control rounds and every untraced sample run paused),
and it reports the rounds it was asked for. Timings are not asserted (BENCHMARKS.md has them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tilelens.core import writer_process
from tilelens.core.native_training import LAUNCHES_PER_STEP, stand_in_step, stand_in_triton_run


def test_only_the_recorded_rounds_and_the_warm_up_are_recorded(tmp_path: Path) -> None:
    from benchmarks.compiled_step import interleaved

    step = stand_in_step()
    rounds, steps, lead = 6, 2, 1
    with stand_in_triton_run():
        got = interleaved(
            step, LAUNCHES_PER_STEP, tmp_path, sync=lambda: None, rounds=rounds, steps=steps, lead=lead
        )
    recorded_rounds = rounds // 2
    # The warm-up's lead steps, then per recorded round its lead and its timed steps; controls: none.
    assert (
        got["interleaved_recorded_launches"] == (lead + recorded_rounds * (lead + steps)) * LAUNCHES_PER_STEP
    )
    assert (got["interleaved_rounds"], got["interleaved_steps"]) == (rounds, steps)
    assert 0 < got["interleaved_ratio_low"] <= got["interleaved_ratio_high"]
    assert got["interleaved_ratio"] == got["interleaved_recorded_median"] / got["interleaved_control_median"]


def test_the_timed_samples_launches_reach_the_writer_from_the_launching_thread_without_a_feeder_wake(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the bench prints beside the estimate: batches the launching thread wrote during the timed recorded
    samples (none when every batch is queued), and the feeder's wakes then (none here: a steady program queues
    nothing, every flush is outside them, and batches go when full)."""
    from benchmarks.compiled_step import interleaved

    monkeypatch.setattr(writer_process, "BATCH_BYTES", 256)  # a batch every few launches of the stand-in
    monkeypatch.setattr(writer_process, "FEED_S", 30.0)  # batches go when full, not by age
    with stand_in_triton_run():
        got = interleaved(
            stand_in_step(), LAUNCHES_PER_STEP, tmp_path, sync=lambda: None, rounds=6, steps=4, lead=1
        )
    assert got["interleaved_direct_batches"] >= 3 and got["interleaved_feeder_wakes"] == 0
    monkeypatch.setattr(writer_process, "DIRECT_SEND", False)  # every batch queued, for the feeder
    with stand_in_triton_run():
        got = interleaved(
            stand_in_step(), LAUNCHES_PER_STEP, tmp_path / "q", sync=lambda: None, rounds=6, steps=4, lead=1
        )
    assert got["interleaved_direct_batches"] == 0
