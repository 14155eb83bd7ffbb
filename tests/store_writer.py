"""A writer process for the crash and concurrency tests: writes launches as fast as it can.

Usage: python -m tests.store_writer DB_PATH COUNT SEED [DISTINCT]  (COUNT 0 = until killed). Prints "ready" once
its first launch is committed, so a test knows the history exists before it starts killing. With DISTINCT, launch
i stores the same tensors as launch i % DISTINCT (of any writer with that DISTINCT): blobs are reused.
"""

from __future__ import annotations

import sys

import torch

from tests import store_helpers
from tilelens.records import LaunchRecord
from tilelens.store import History


def make_launch(i: int, gen: torch.Generator, distinct: int = 0) -> LaunchRecord:
    """Launch ``i`` of a writer: fresh random content from ``gen``, or with ``distinct`` that of i % distinct."""
    if distinct:
        gen = torch.Generator().manual_seed(i % distinct)
    big = torch.randn(256 * 1024, generator=gen)  # 1 MiB of float32 content per launch
    small = torch.randn(64, generator=gen)
    k = i % distinct if distinct else i
    return store_helpers.launch(
        big, torch.zeros(64), small, trace=store_helpers.trace_table(16 + k % 7), seq=i
    )


def main() -> None:
    db, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    distinct = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    gen = torch.Generator().manual_seed(seed)
    with History.open(db) as h:
        run = h.begin_run(store_helpers.run_info(tag=f"writer-{seed}"))
        i = 0
        while count == 0 or i < count:
            h.write_launch(run, make_launch(i, gen, distinct))
            if i == 0:
                print("ready", flush=True)
            i += 1
        h.finish_run(run, "ok", 0)


if __name__ == "__main__":
    main()
