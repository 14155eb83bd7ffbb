#!/usr/bin/env python3
"""What ``tilelens check`` costs beside recording: the seed workloads recorded, then their launches checked.

    python scripts/bench_check.py                    # every seed shape, 3 samples each
    python scripts/bench_check.py --quick --only gemm,softmax

Per case: the recorded call (one or more launches) timed after a warm-up call, and ``api.check_launches`` over
the launches that call made (the history already open: what ``tilelens check`` adds to its start-up). Times
are this thread's CPU time (``time.thread_time``): on a busy shared machine wall time mostly measures the
neighbours. The minimum of the samples is reported; the target is check / record <= 1.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one shape per workload")
    p.add_argument("--samples", type=int, default=3, help="samples per measurement (default 3)")
    p.add_argument("--only", default="", help="comma-separated workload names")
    p.add_argument("--json", type=Path, help="write every figure to this file")
    args = p.parse_args(argv)

    import tilelens
    from benchmarks.workloads import all_cases
    from tilelens import api

    only = {n for n in args.only.split(",") if n}
    cases = [c for c in all_cases(args.quick) if not only or c.workload in only]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        db, blobs = str(Path(tmp) / "h.db"), Path(tmp) / "blobs"
        with tilelens.record(db, blobs) as rec:
            for case in cases:
                case.run()  # warm-up: Triton's parse, TileLens's first-launch work
                record_s, ids = [], []
                for _ in range(args.samples):
                    start, before = time.thread_time(), len(rec.launch_ids)
                    case.run()
                    record_s.append(time.thread_time() - start)
                    ids = rec.launch_ids[before:]
                rows.append({"case": case.name, "launches": list(ids), "record_s": min(record_s)})
        with api.open_query(db, blobs) as q:
            for row in rows:
                api.check_launches(q, row["launches"])  # warm: the blob read and imports once
                check_s, findings = [], 0
                for _ in range(args.samples):
                    start = time.thread_time()
                    checks = api.check_launches(q, row["launches"])
                    check_s.append(time.thread_time() - start)
                    findings = sum(len(c.findings) for c in checks)
                lanes = sum(launch.lanes or 0 for launch in (q.launch(i).launch for i in row["launches"]))
                row.update(check_s=min(check_s), findings=findings, lanes=lanes)
                row["ratio"] = row["check_s"] / row["record_s"]
    print(f"{'case':<42} {'lanes':>10} {'record ms':>10} {'check ms':>9} {'check/record':>12} findings")
    for r in rows:
        print(
            f"{r['case']:<42} {r['lanes']:>10,} {r['record_s'] * 1e3:>10.1f} {r['check_s'] * 1e3:>9.1f} "
            f"{r['ratio']:>12.3f} {r['findings']:>8}"
        )
    worst = max(rows, key=lambda r: r["ratio"])
    print(f"worst check/record: {worst['ratio']:.3f} ({worst['case']})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
