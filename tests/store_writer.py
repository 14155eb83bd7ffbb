"""A writer process for the crash and concurrency tests: writes launches as fast as it can.

Usage: python -m tests.store_writer DB_PATH COUNT SEED  (COUNT 0 = until killed). Prints "ready" once its
first launch is committed, so a test knows the history exists before it starts killing.
"""

from __future__ import annotations

import sys

import torch

from tests import store_helpers
from tilelens.store import History


def main() -> None:
    db, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    gen = torch.Generator().manual_seed(seed)
    with History.open(db) as h:
        run = h.begin_run(store_helpers.run_info(tag=f"writer-{seed}"))
        i = 0
        while count == 0 or i < count:
            big = torch.randn(256 * 1024, generator=gen)  # 1 MiB of fresh float32 content per launch
            small = torch.randn(64, generator=gen)
            rec = store_helpers.launch(
                big, torch.zeros(64), small, trace=store_helpers.trace_table(16 + i % 7), seq=i
            )
            h.write_launch(run, rec)
            if i == 0:
                print("ready", flush=True)
            i += 1
        h.finish_run(run, "ok", 0)


if __name__ == "__main__":
    main()
