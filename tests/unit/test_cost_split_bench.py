"""``benchmarks.cost_split`` on the CPU stand-in step: each variant does what it says (as recorded: every
recorded launch written; fed late: written too, at the flushes; fed to a discarding writer: none written; no
autotuner frames: launches without a tuning key) and every replacement is undone afterwards. Timings are not
asserted (BENCHMARKS.md has them)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from benchmarks import cost_split
from tilelens.core import compat, compiled_native, interpreter, writer_process
from tilelens.core.native_training import LAUNCHES_PER_STEP, stand_in_step, stand_in_triton_run


def test_each_variant_writes_what_it_says_and_is_undone_after() -> None:
    feed, direct, start, send = (
        writer_process.FEED_S,
        writer_process.DIRECT_SEND,
        writer_process._writer_process,
        writer_process.ProcessWriter._send,
    )
    rounds, steps, lead = 4, 1, 1
    with stand_in_triton_run():
        got = cost_split.run(
            stand_in_step(),
            LAUNCHES_PER_STEP,
            sync=lambda: None,
            rounds=rounds,
            reps=1,
            steps=steps,
            lead=lead,
        )
    # The warm-up's lead steps, then each recorded round's lead and timed steps.
    recorded = (lead + rounds // 2 * (lead + steps)) * LAUNCHES_PER_STEP
    assert {name: [r["interleaved_recorded_launches"] for r in runs] for name, runs in got.items()} == {
        "D": [recorded],
        "X": [0],
        "F": [recorded],
        "T": [recorded],
        "Q": [recorded],
        "A": [recorded],
    }
    assert feed == writer_process.FEED_S and direct == writer_process.DIRECT_SEND
    assert writer_process._writer_process is start
    assert writer_process.ProcessWriter._send is send
    text = cost_split.report(got)
    assert [line.split(":")[0].strip() for line in text.splitlines()] == ["D", "X", "F", "T", "Q", "A"]


def test_queued_sends_no_batch_directly_and_as_recorded_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Q`` queues every batch for the feeder; ``D`` (as recorded) has the launcher write full ones into the
    pipe itself. Both write every recorded launch."""
    direct: list[int] = []
    close = writer_process.ProcessWriter.close

    def counting(writer: writer_process.ProcessWriter) -> None:
        direct.append(0 if writer._batch is None else writer._batch.sent_launches)
        close(writer)

    monkeypatch.setattr(writer_process.ProcessWriter, "close", counting)
    monkeypatch.setattr(writer_process, "BATCH_BYTES", 256)  # a batch every few launches of the stand-in
    launches = {}
    with stand_in_triton_run():
        for name in ("Q", "D"):
            direct.clear()
            got = cost_split.run(
                stand_in_step(),
                LAUNCHES_PER_STEP,
                sync=lambda: None,
                rounds=4,
                reps=1,
                steps=2,
                lead=1,
                variants=(name,),
            )
            launches[name] = (got[name][0]["interleaved_recorded_launches"], sum(direct) > 0)
    recorded = (1 + 2 * (1 + 2)) * LAUNCHES_PER_STEP
    assert launches == {"Q": (recorded, False), "D": (recorded, True)}


def _tuning_keys(folder: Path) -> list[str | None]:
    with sqlite3.connect(folder / "h.db") as db:
        return [key for (key,) in db.execute("SELECT tuning_key FROM launches ORDER BY seq")]


def test_without_tuner_interception_the_autotuned_launches_have_no_frame(
    tmp_path: Path, native_module: object
) -> None:
    """``D`` frames an autotuner's launches from its Python frame, its ``run`` Triton's own; ``A`` intercepts
    each autotuner call instead; ``T`` does neither: no tuning key."""
    import tilelens

    patcher_set, tuner_run = interpreter._Patcher.set, vars(compat.Autotuner)["run"]
    frames = compiled_native.CALLER_FRAMES
    step = stand_in_step()
    with stand_in_triton_run():
        for name, framed in (("D", True), ("A", True), ("T", False)):
            folder = tmp_path / name
            with contextlib.ExitStack() as stack:
                if name != "D":
                    stack.enter_context(cost_split.intercepted_tuner())
                if name == "T":
                    stack.enter_context(cost_split.no_tuner_interception())
                stack.enter_context(
                    tilelens.Recording(
                        str(folder / "h.db"), folder / "b", backend="compiled", snapshots="none"
                    )
                )
                own_run = vars(compat.Autotuner)["run"] is tuner_run
                step()
            keys = _tuning_keys(folder)
            # The stand-in step: four launches of the autotuned kernel (tuned: a tuning key), one plain launch.
            assert len(keys) == LAUNCHES_PER_STEP
            assert sum(key is not None for key in keys) == (4 if framed else 0)
            assert own_run is (name == "T" or (name == "D" and compiled_native.CALLER_FRAMES))
    # Afterwards Triton's autotuner, TileLens's patcher and the switch are as they were.
    assert vars(compat.Autotuner)["run"] is tuner_run
    assert interpreter._Patcher.set is patcher_set
    assert compiled_native.CALLER_FRAMES is frames


def test_an_unknown_variant_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="variants are D, X, F, T, Q, A, not M"):
        cost_split.run(lambda: None, 1, sync=lambda: None, variants=("D", "M"))
