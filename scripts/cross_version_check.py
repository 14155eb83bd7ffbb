#!/usr/bin/env python3
"""Replay under other Tritons: record the examples with this environment's Triton, then replay every launch
in each Python given (another venv, another Triton) through ``tilelens replay --python``, on the CPU.

    python scripts/cross_version_check.py .venv-triton-3.6.0/bin/python .venv-triton-3.9.0/bin/python

Prints one line per launch and Python, then a summary; exits 1 when any replay is not a match (the
out-of-bounds example's launch reads memory no argument owns, which repro.py cannot feed back: it is counted
apart and does not fail the check). ``.ci/run`` runs it after the suites on Triton 3.6 and 3.9.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(pythons: list[str]) -> int:
    if not pythons:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tilelens-cross-") as name:
        where = ["--db", str(Path(name) / "h.db"), "--blobs", str(Path(name) / "blobs")]
        cli = [sys.executable, "-m", "tilelens.cli", *where]
        done = subprocess.run(
            [*cli, "record", str(ROOT / "examples" / "run_all.py")], capture_output=True, text=True
        )
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return 2
        listed = subprocess.run([*cli, "ls", "--json"], capture_output=True, text=True, check=True)
        launches = [(int(row["id"]), row["kernel"]) for row in json.loads(listed.stdout)]
        failures = skipped = checked = 0
        for python in pythons:
            for launch, kernel in sorted(launches):
                done = subprocess.run(
                    [*cli, "replay", str(launch), "--python", python, "--json", "--no-store"],
                    capture_output=True,
                    text=True,
                )
                try:
                    result = json.loads(done.stdout)
                except ValueError:
                    result = {"outcome": "error", "message": (done.stderr.strip().splitlines() or ["?"])[-1]}
                message = " ".join(str(result.get("message", "")).split())
                print(f"{python}  launch {launch:3d} {kernel:40s} {result['outcome']:9s} {message[:160]}")
                checked += 1
                if result["outcome"] != "match":
                    if kernel.endswith("oob_kernel") or "oob" in kernel:
                        skipped += 1
                    else:
                        failures += 1
        print(
            f"{checked} replays in {len(pythons)} interpreter(s): {checked - failures - skipped} match, "
            f"{failures} not, {skipped} out-of-bounds readers not judged"
        )
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
