"""`scripts/bench.py --compare REF`: the suite on a git ref and on the working tree, interleaved.

Each round runs one worker process per tree, alternating, so machine drift lands on both; the minimum over
rounds is compared. The ref is checked out in a temporary worktree and must itself have scripts/bench.py.
The table is the one the seed's review bot prints: main (min), change (min), change %, ⚠️ over 5 %, samples.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THRESHOLD = 0.05


def _worker(tree: Path, quick: bool, only: str) -> dict[str, float]:
    cmd = [
        sys.executable,
        str(tree / "scripts" / "bench.py"),
        "--worker",
        "--samples",
        "1",
        "--skip-history",
        "--skip-concurrency",
    ]
    if quick:
        cmd.append("--quick")
    if only:
        cmd += ["--only", only]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"benchmark worker failed in {tree}:\n{done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    per_workload: dict[str, float] = {}
    for w in report["workloads"]:
        per_workload[w["workload"]] = per_workload.get(w["workload"], 0.0) + w["recorded_s"]
    return per_workload


def table(base: dict[str, list[float]], change: dict[str, list[float]], ref: str) -> str:
    lines = [f"| Benchmark | {ref} (min) | change (min) | Change | Samples |", "|---|---|---|---|---|"]
    total_b = total_c = 0.0
    for name in base:
        if name not in change:
            continue
        b, c = min(base[name]), min(change[name])
        total_b += b
        total_c += c
        pct = (c - b) / b
        flag = " ⚠️" if pct > THRESHOLD else ""
        lines.append(
            f"| {name} | {b:.3f}s | {c:.3f}s | {pct:+.1%}{flag} | {len(base[name])} / {len(change[name])} |"
        )
    if total_b:
        lines.append(
            f"| Total | {total_b:.3f}s | {total_c:.3f}s | {(total_c - total_b) / total_b:+.1%} | N/A |"
        )
    lines.append("")
    lines.append(f"Threshold: >{THRESHOLD:.0%} regression flagged with ⚠️")
    return "\n".join(lines)


def compare(ref: str, *, quick: bool, samples: int, only: str = "") -> int:
    with tempfile.TemporaryDirectory(prefix="tilelens-compare-") as tmp:
        tree = Path(tmp) / "ref"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), ref],
            check=True,
            capture_output=True,
        )
        try:
            if not (tree / "scripts" / "bench.py").exists():
                print(f"{ref} has no scripts/bench.py to compare against", file=sys.stderr)
                return 2
            base: dict[str, list[float]] = {}
            change: dict[str, list[float]] = {}
            for i in range(samples):
                print(f"  round {i + 1}/{samples}", file=sys.stderr, flush=True)
                for tree_root, into in ((tree, base), (ROOT, change)):
                    for name, seconds in _worker(tree_root, quick, only).items():
                        into.setdefault(name, []).append(seconds)
            print(table(base, change, ref))
            return 0
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True
            )
