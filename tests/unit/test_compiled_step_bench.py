"""``benchmarks.compiled_step.interleaved``, the bench's launch-bound estimate, on the CPU stand-in step: its
recorded rounds are recorded and nothing else is (the control rounds and every untraced sample run paused),
and it reports the rounds it was asked for. Timings are not asserted (BENCHMARKS.md has them)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.standin import LAUNCHES_PER_STEP, stand_in_step, stand_in_triton_run


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
