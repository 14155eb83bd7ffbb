#!/usr/bin/env python3
"""On a CUDA machine: how a compiled recording's launches of the bench step travel (diagnostic for issue 15).

Records ``steps`` steps of ``benchmarks.compiled_step.Step`` with ``snapshots="none"`` and prints: launches,
templates made on the program's thread, launches sent raw, launches the writer process wrote from template
rows, the loop's time and the drain at the end of the block.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    import torch

    import tilelens
    from benchmarks.compiled_step import Step

    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    step = Step(2048, 1024, 2816, 32000, 8)
    step.run()
    torch.cuda.synchronize()
    folder = Path(tempfile.mkdtemp())
    for i in range(2):
        rec = tilelens.Recording(
            str(folder / f"h{i}.db"), folder / f"b{i}", backend="compiled", snapshots="none"
        )
        with rec:
            router = rec._compiled
            raw_sent = 0
            submit = router.submit

            def counting(k, raw, submit=submit):  # type: ignore[no-untyped-def]
                nonlocal raw_sent
                raw_sent += 1
                return submit(k, raw)

            router.submit = counting
            t0 = time.perf_counter()
            for _ in range(steps):
                step.run()
            torch.cuda.synchronize()
            loop = time.perf_counter() - t0
        total = time.perf_counter() - t0
        w = rec._writer
        print(
            f"launches {len(rec.launch_ids)}, templates {len(router._templates.keep)}, sent raw {raw_sent}, "
            f"written from template rows {getattr(w, 'from_templates', None)}, failure {rec.write_failure}; "
            f"loop {loop:.3f} s, with drain {total:.3f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
