#!/usr/bin/env python3
"""CPU replay cost against recording cost, launch by launch (target: replay <= 1.2x the recorded run).

    python scripts/bench_replay.py            # the examples as they are, and scaled up
    python scripts/bench_replay.py --quick    # the examples as they are
    python scripts/bench_replay.py --json out.json

"recorded" is ``Launch.duration_s``: the interpreted run of the recorded launch. "cold" is what
``tilelens replay ID`` spends after its imports, in a fresh process: opening the history, reading rows and blobs,
loading the kernel's module, tracing it, running, comparing and writing the replay row. "warm" is a second replay
of the same launch in that process (kernel loaded and traced, caches hot): the cost per launch of a batch replay.
"""

from __future__ import annotations

import argparse
import json
import runpy
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.2

_CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from tilelens.replay import KernelResolver, replay_launch
from tilelens.store import History
t0 = time.perf_counter()
with History.open({db!r}, {blobs!r}) as h:
    cold = replay_launch(h, {launch}, store=False)
    cold_s = time.perf_counter() - t0
    resolver = KernelResolver()
    replay_launch(h, {launch}, store=False, resolver=resolver)
    warm = [replay_launch(h, {launch}, resolver=resolver) for _ in range(3)]
print(json.dumps({{"outcome": cold.outcome, "cold_s": cold_s, "cold_run_s": cold.run_s,
                   "warm_s": min(w.duration_s for w in warm), "warm_run_s": min(w.run_s for w in warm),
                   "warm_outcome": warm[-1].outcome}}))
"""


def record(where: dict[str, str], scaled: bool) -> None:
    import torch

    import tilelens

    sys.path.insert(0, str(ROOT / "examples"))
    with tilelens.record(**where):
        runpy.run_path(str(ROOT / "examples" / "run_all.py"), run_name="__main__")
        if scaled:
            import autotuned_matmul
            import heuristics_scale
            import softmax
            import vector_add

            torch.manual_seed(0)
            vector_add.add(torch.randn(1 << 20), torch.randn(1 << 20))
            softmax.softmax(torch.randn(512, 1000))
            autotuned_matmul.matmul(torch.randn(256, 192), torch.randn(192, 160))
            heuristics_scale.scale(torch.randn(1 << 18), 0.5)


def launches(where: dict[str, str]) -> list[tuple[int, str, str, float]]:
    from sqlalchemy import select

    from tilelens.store import History
    from tilelens.store.sql.models import Launch

    with History.open(**where) as h, h.session() as s:
        rows = s.scalars(select(Launch).where(Launch.role == "launch").order_by(Launch.id)).all()
        out = []
        for r in rows:
            shape = next((a.shape for a in r.args if a.kind == "tensor"), None)
            out.append((r.id, r.kernel.qualname, "x".join(map(str, shape or [])), r.duration_s))
        return out


def measure(where: dict[str, str], launch: int) -> dict[str, object]:
    code = _CHILD.format(root=str(ROOT), db=where["db"], blobs=where["blobs"], launch=launch)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="only the examples as they are")
    p.add_argument("--json", metavar="PATH", help="write every figure to this file")
    args = p.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="tilelens-bench-replay-"))
    where = {"db": str(folder / "h.db"), "blobs": str(folder / "blobs")}
    record(where, scaled=not args.quick)
    rows = []
    print(
        "| launch | kernel | shape | recorded | cold replay | cold/rec | warm replay | warm/rec | run/rec | match |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for launch, kernel, shape, recorded in launches(where):
        m = measure(where, launch)
        row = {"launch": launch, "kernel": kernel, "shape": shape, "recorded_s": recorded, **m}
        row["cold_ratio"] = m["cold_s"] / recorded
        row["warm_ratio"] = m["warm_s"] / recorded
        row["run_ratio"] = m["warm_run_s"] / recorded
        rows.append(row)
        print(
            f"| {launch} | {kernel} | {shape} | {recorded * 1e3:.1f} ms | {m['cold_s'] * 1e3:.1f} ms | "
            f"{row['cold_ratio']:.2f} | {m['warm_s'] * 1e3:.1f} ms | {row['warm_ratio']:.2f} | "
            f"{row['run_ratio']:.2f} | {m['outcome']}/{m['warm_outcome']} |"
        )
    big = [r for r in rows if r["recorded_s"] >= 0.1]
    print()
    print(
        f"median warm/rec {statistics.median(r['warm_ratio'] for r in rows):.2f}, "
        f"median cold/rec {statistics.median(r['cold_ratio'] for r in rows):.2f}"
        + (
            f"; launches recorded in >= 100 ms: max warm/rec {max(r['warm_ratio'] for r in big):.2f}, "
            f"max cold/rec {max(r['cold_ratio'] for r in big):.2f} (target <= {TARGET})"
            if big
            else ""
        )
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["outcome"] == "match" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
