"""``benchmarks.writer_share`` on the CPU stand-in step: each variant does what it says (as recorded: every
recorded launch written; fed late: written too, at the flushes; fed to a discarding writer: none written) and
every replacement is undone afterwards. Timings are not asserted (BENCHMARKS.md has them)."""

from __future__ import annotations

import pytest

from benchmarks import writer_share
from tilelens.core import writer_process
from tilelens.core.native_training import LAUNCHES_PER_STEP, stand_in_step, stand_in_triton_run


def test_each_variant_writes_what_it_says_and_is_undone_after() -> None:
    feed, start = writer_process.FEED_S, writer_process._writer_process
    rounds, steps, lead = 4, 1, 1
    with stand_in_triton_run():
        got = writer_share.run(
            stand_in_step(),
            LAUNCHES_PER_STEP,
            sync=lambda: None,
            rounds=rounds,
            reps=1,
            steps=steps,
            lead=lead,
        )
    recorded = (
        lead + rounds // 2 * (lead + steps)
    ) * LAUNCHES_PER_STEP  # the warm-up, then each recorded round
    assert {name: [r["interleaved_recorded_launches"] for r in runs] for name, runs in got.items()} == {
        "D": [recorded],
        "X": [0],
        "F": [recorded],
    }
    assert feed == writer_process.FEED_S
    assert writer_process._writer_process is start
    text = writer_share.report(got)
    assert [line.split(":")[0].strip() for line in text.splitlines()] == ["D", "X", "F"]


def test_an_unknown_variant_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="variants are D, X, F, not Q"):
        writer_share.run(lambda: None, 1, sync=lambda: None, variants=("D", "Q"))
