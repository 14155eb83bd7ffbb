"""``benchmarks.writer_throughput`` runs: it reads what a recording queued (packed and marshalled launches) and
writes it both ways. It broke once, silently, when launches began to be queued packed; the figures it prints
are not asserted here (speed lives in ``scripts/bench.py``), only that it writes what it says it writes."""

from __future__ import annotations

from pathlib import Path

from benchmarks import writer_throughput


def test_the_writer_benchmark_writes_every_launch_after_the_first_batch_both_ways() -> None:
    got = writer_throughput.run(400)
    templated, usual = got["templated"], got["usual"]
    assert templated["launches"] == usual["launches"] > 100
    assert templated["from_templates"] == templated["launches"]  # every one from its template's rows
    assert usual["from_templates"] == 0
    assert got["sql_us"] > 0


def test_the_bench_step_on_the_cpu_sends_the_gpu_bench_launch_mix(tmp_path: Path) -> None:
    import sqlite3

    items = writer_throughput.sent_items(3 * 42, tmp_path, "bench")
    kernels = sorted(item[2][1] for item in items if item[0] == "k")
    assert kernels == [
        "_rms_norm_forward_kernel",
        "_swiglu_forward_kernel",
        "bf16_matmul_kernel",
        "liger_cross_entropy_kernel",
    ]
    launches = [item for item in items if item[0] in ("m", "l")]
    # Three steps of 8 layers: 5 launches a layer, then the vocabulary's matmul and the loss.
    assert len(launches) == 3 * 42
    # What the items say a launch writes is what the recording's writer process wrote.
    with sqlite3.connect(tmp_path / "sent.db") as db:
        (stored,) = db.execute("SELECT count(*) FROM launches").fetchone()
        (rows,) = db.execute("SELECT count(*) FROM launch_args").fetchone()
    assert stored == len(launches)
    assert writer_throughput.arg_rows(items) == rows / stored
    # Per layer: RMSNorm 14 rows, three matmuls of 10, SwiGLU 7; then the vocabulary's matmul and the
    # cross entropy's 28.
    assert rows == 3 * (8 * (14 + 3 * 10 + 7) + 10 + 28)


def test_the_bench_step_on_the_cpu_leaves_the_autotuner_as_it_was() -> None:
    from benchmarks.compiled_step import bf16_matmul_kernel

    before = dict(vars(bf16_matmul_kernel))
    with writer_throughput.bench_step_on_cpu(layers=1) as (step, per_step):
        assert per_step == 7
        assert bf16_matmul_kernel.do_bench(lambda: None, quantiles=(0.5, 0.2, 0.8)) == [1.0, 1.0, 1.0]
        step()
    after = vars(bf16_matmul_kernel)
    # What the block's tuning added (the chosen configs and their timings) stays; the stand-in does not.
    assert {k: v for k, v in after.items() if k in before and k not in ("cache", "configs_timings")} == {
        k: v for k, v in before.items() if k not in ("cache", "configs_timings")
    }
    assert set(after) - set(before) <= {"cache", "configs_timings", "nargs", "bench_time", "best_config"}
    assert "do_bench" not in after or after["do_bench"] is before.get("do_bench")
