"""``benchmarks.writer_throughput`` runs: it reads what a recording queued (packed and marshalled launches) and
writes it both ways. It broke once, silently, when launches began to be queued packed; the figures it prints
are not asserted here (speed lives in ``scripts/bench.py``), only that it writes what it says it writes."""

from __future__ import annotations

from benchmarks import writer_throughput


def test_the_writer_benchmark_writes_every_launch_after_the_first_batch_both_ways() -> None:
    got = writer_throughput.run(400)
    templated, usual = got["templated"], got["usual"]
    assert templated["launches"] == usual["launches"] > 100
    assert templated["from_templates"] == templated["launches"]  # every one from its template's rows
    assert usual["from_templates"] == 0
    assert got["sql_us"] > 0
