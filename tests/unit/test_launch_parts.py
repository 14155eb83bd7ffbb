"""``benchmarks.launch_parts`` and the profiling build behind it (``TILELENS_NATIVE_PROFILE=1``): every part of
the steady compiled launch is stamped exactly as often as it runs, on the CPU stand-in step (four autotuned
launches and one plain launch a step, all steady and found among their kernels' kept templates after the
warm-up), and an ordinary build has no profile."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tilelens.core import compat, compiled_native, native

ROOT = Path(__file__).resolve().parents[2]
STEPS = 30
PER_STEP = {"launch": 5, "tune": 4}  # native_training.stand_in_step
# An autotuner's call intercepted and framed (``compiled_native.CALLER_FRAMES`` off, or Python 3.10), or its
# launch framed from the autotuner's own Python frame: one or the other runs, once per autotuned launch.
TUNER_PARTS = ("intercept_tune", "tune_before", "tune_run", "tune_after")
CALLER_PARTS = ("caller_before", "caller_after")
# The slower template tests run only when no kept template is the launch's: after the warm-up, never.
SLOWER_PARTS = ("last", "lookup")


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"), reason="the profiling build is x86-64 only"
)
def test_every_part_of_the_steady_launch_is_counted_once_a_launch(native_module: Any) -> None:
    env = {k: v for k, v in os.environ.items() if k != native.PROFILE_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.launch_parts", "--stand-in", "--steps", str(STEPS), "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["launches"] == STEPS * PER_STEP["launch"]
    parts = result["parts"]
    assert len(parts) == 19 and list(parts)[:2] == ["intercept_launch", "intercept_tune"]
    by_caller = compiled_native.CALLER_FRAMES and compat.AUTOTUNER_RUN_CODE is not None
    unused = TUNER_PARTS if by_caller else CALLER_PARTS
    for name, (ticks, calls) in parts.items():
        if name in unused:
            assert (ticks, calls) == (0, 0), name
            continue
        if name == "last" and result["kernels_share_a_place"]:
            # the two kernels take turns at one launcher place: each step, each finds its last template in place
            assert calls == 2 * STEPS and ticks > 0, name
            continue
        if name in SLOWER_PARTS:
            assert (ticks, calls) == (0, 0), name
            continue
        expected = STEPS * (PER_STEP["tune"] if name in TUNER_PARTS + CALLER_PARTS else PER_STEP["launch"])
        assert calls == expected, name
        assert ticks > 0, name
    assert result["ticks_per_second"] > 1e8


def test_an_ordinary_build_has_no_profile(native_module: Any) -> None:
    assert native.flags() == native.FLAGS
    assert native_module.profile(True) is None and native_module.ticks() is None
