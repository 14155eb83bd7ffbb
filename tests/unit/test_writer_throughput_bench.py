"""``benchmarks.writer_throughput`` runs: it reads what a recording queued (packed and marshalled launches) and
writes it both ways. It broke once, silently, when launches began to be queued packed; the figures it prints
are not asserted here (speed lives in ``scripts/bench.py``), only that it writes what it says it writes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks import writer_throughput

ROOT = Path(__file__).resolve().parents[2]


def test_the_writer_benchmark_writes_every_launch_after_the_first_batch_both_ways() -> None:
    got = writer_throughput.run(400)
    templated, usual = got["templated"], got["usual"]
    assert templated["launches"] == usual["launches"] > 100
    assert templated["from_templates"] == templated["launches"]  # every one from its template's rows
    assert usual["from_templates"] == 0
    assert got["sql_us"] > 0


# The bench step's tests run in a process of their own without TRITON_INTERPRET: an xdist worker that imported
# tests/unit/test_multithreading.py (which sets it) decorates every kernel imported later as interpreted, and
# Liger's or the bench's kernels may already be imported so by another test of the worker.
def _in_clean_process(code: str) -> Any:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_bench_step_on_the_cpu_sends_the_gpu_bench_launch_mix(tmp_path: Path) -> None:
    got = _in_clean_process(
        "import json, pathlib; from benchmarks import writer_throughput as w\n"
        f"items = w.sent_items(3 * 42, pathlib.Path({str(tmp_path)!r}), 'bench')\n"
        "print(json.dumps({'kernels': sorted(i[2][1] for i in items if i[0] == 'k'),\n"
        "  'launches': sum(1 for i in items if i[0] in ('m', 'l')), 'arg_rows': w.arg_rows(items)}))"
    )
    assert got["kernels"] == [
        "_rms_norm_forward_kernel",
        "_swiglu_forward_kernel",
        "bf16_matmul_kernel",
        "liger_cross_entropy_kernel",
    ]
    # Three steps of 8 layers: 5 launches a layer, then the vocabulary's matmul and the loss.
    assert got["launches"] == 3 * 42
    # What the items say a launch writes is what the recording's writer process wrote.
    with sqlite3.connect(tmp_path / "sent.db") as db:
        (stored,) = db.execute("SELECT count(*) FROM launches").fetchone()
        (rows,) = db.execute("SELECT count(*) FROM launch_args").fetchone()
    assert stored == got["launches"]
    assert got["arg_rows"] == rows / stored
    # Per layer: RMSNorm 14 rows, three matmuls of 10, SwiGLU 7; then the vocabulary's matmul and the
    # cross entropy's 28.
    assert rows == 3 * (8 * (14 + 3 * 10 + 7) + 10 + 28)


def test_the_bench_step_on_the_cpu_leaves_the_autotuner_as_it_was() -> None:
    got = _in_clean_process(
        "import json; from benchmarks import writer_throughput as w\n"
        "w._import_compiled_mode()\n"
        "from benchmarks.compiled_step import bf16_matmul_kernel as t\n"
        "before = set(vars(t))\n"
        "with w.bench_step_on_cpu(layers=1) as (step, per_step):\n"
        "    timed = t.do_bench(lambda: None, quantiles=(0.5, 0.2, 0.8))\n"
        "    step()\n"
        "print(json.dumps({'per_step': per_step, 'timed': timed, 'before': sorted(before),\n"
        "  'added': sorted(set(vars(t)) - before), 'do_bench': 'do_bench' in vars(t)}))"
    )
    assert got["per_step"] == 7
    assert got["timed"] == [1.0, 1.0, 1.0]  # the stand-in, inside the block
    # What the block's tuning added stays (its cache, the chosen config); the stand-in does not.
    assert "do_bench" not in got["before"] and got["do_bench"] is False
    assert set(got["added"]) <= {"cache", "configs_timings", "nargs", "bench_time", "best_config"}


def test_a_kernel_module_imported_interpreted_is_refused_by_name() -> None:
    code = (
        "import os; os.environ['TRITON_INTERPRET'] = '1'\n"
        "import liger_kernel.ops.rms_norm\n"
        "from benchmarks import writer_throughput as w\n"
        "try:\n"
        "    w._import_compiled_mode()\n"
        "except RuntimeError as e:\n"
        "    import json; print(json.dumps(str(e)))\n"
    )
    message = _in_clean_process(code)
    assert message.startswith("liger_kernel.ops.rms_norm was imported under TRITON_INTERPRET=1")
