"""``benchmarks.launch_cost``: its reading of callgrind's files, its arithmetic, the command it runs and the
program it counts. Valgrind itself is not run here (minutes; not installed in CI): the child runs natively,
with the same markers callgrind would act on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmarks import launch_cost

# The head of a callgrind output file with cache and branch simulation (events in callgrind's order).
CACHE_SIM = """\
version: 1
creator: callgrind-3.19.0
desc: Trigger: --dump-before=os_getppid
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim
summary: 31906078 9769583 5469647 895795 261832 86170 1577 928 1366 4300704 320358 926068 356961
fl=(1) ceval.c
fn=(1) _PyEval_EvalFrameDefault
0 4139015 1 2 3 4 5 6 7 8 9 10 11 12
totals: 1 2 3 4 5 6 7 8 9 10 11 12 13
"""


def test_counts_are_read_from_the_summary_line_with_last_level_misses_summed() -> None:
    counts = launch_cost.parse_counts(CACHE_SIM)
    assert counts == {
        "Ir": 31906078,
        "I1mr": 895795,
        "D1mr": 261832,
        "D1mw": 86170,
        "LLm": 1577 + 928 + 1366,
        "Bcm": 320358,
        "Bim": 356961,
    }


def test_totals_stand_in_for_a_missing_summary_line() -> None:
    text = CACHE_SIM.replace("summary: 31906078", "ignored: 31906078")
    assert launch_cost.parse_counts(text)["Ir"] == 1
    assert launch_cost.parse_counts(text)["Bim"] == 13


def test_a_file_without_cache_or_branch_simulation_is_refused_not_read_as_zero_misses() -> None:
    with pytest.raises(ValueError, match="did not simulate"):
        launch_cost.parse_counts("events: Ir\nsummary: 1000\n")
    with pytest.raises(ValueError, match="not a callgrind output file"):
        launch_cost.parse_counts("hello\n")


def test_per_launch_divides_and_the_estimate_weighs_each_event() -> None:
    cost = launch_cost.Cost(launch_cost.parse_counts(CACHE_SIM), 500)
    per = cost.per_launch()
    assert per["Ir"] == pytest.approx(31906078 / 500)
    assert per["LLm"] == pytest.approx(3871 / 500)
    one_each = dict.fromkeys(launch_cost.EVENTS, 1.0)
    assert launch_cost.estimated_cycles(one_each) == pytest.approx(sum(launch_cost.WEIGHTS.values()))
    only_misses = dict.fromkeys(launch_cost.EVENTS, 0.0) | {"I1mr": 10.0}
    assert launch_cost.estimated_cycles(only_misses) == pytest.approx(140.0)


def test_the_report_shows_what_recording_adds_and_the_ratio() -> None:
    counts = dict.fromkeys(launch_cost.EVENTS, 1000)
    more = {name: 1500 for name in launch_cost.EVENTS}
    text = launch_cost.report(
        {"untraced": launch_cost.Cost(counts, 10), "recorded": launch_cost.Cost(more, 10)}
    )
    lines = text.splitlines()
    assert lines[0].split()[2:] == [*launch_cost.EVENTS, "~cycles"]
    assert lines[1].split()[1:3] == ["100", "100"]
    assert lines[3].split()[1:3] == ["+50", "+50"]
    assert lines[4].split()[1:] == ["1.500"] * (len(launch_cost.EVENTS) + 1)


def test_callgrind_runs_this_python_on_the_child_with_cache_branch_simulation_and_the_markers(
    tmp_path: Path,
) -> None:
    cmd = launch_cost.command("recorded", 7, tmp_path / "cg")
    assert cmd[0] == "valgrind" and "--tool=callgrind" in cmd
    assert {"--cache-sim=yes", "--branch-sim=yes", "--separate-threads=yes", *launch_cost.CACHES} <= set(cmd)
    assert "--zero-before=os_sched_yield*" in cmd and "--dump-before=os_getppid*" in cmd
    assert cmd[cmd.index(sys.executable) :] == [
        sys.executable,
        "-m",
        "benchmarks.launch_cost",
        "--child",
        "recorded",
        "7",
    ]
    with pytest.raises(ValueError, match="variant"):
        launch_cost.measure("other", 1)


def test_the_child_counts_its_loop_between_the_markers_and_records_every_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    real_yield, real_getppid = os.sched_yield, os.getppid

    def zero() -> None:
        calls.append("zero")
        real_yield()

    def dump() -> int:
        calls.append("dump")
        return real_getppid()

    monkeypatch.setattr(os, "sched_yield", zero)
    monkeypatch.setattr(os, "getppid", dump)
    recorded = launch_cost.child("recorded", 3)
    assert calls == ["zero", "dump"]  # callgrind zeroes and dumps once each: exactly the timed loop
    assert recorded == (launch_cost.WARM_STEPS + 3) * launch_cost.LAUNCHES_PER_STEP
    calls.clear()
    assert launch_cost.child("untraced", 3) == 0
    assert calls == ["zero", "dump"]
