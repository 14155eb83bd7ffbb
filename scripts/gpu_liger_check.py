#!/usr/bin/env python3
"""Liger-Kernel's own tests, recorded on a CUDA machine, then replayed (issue 46's end-to-end check).

    python3 scripts/gpu_liger_check.py LIGER_CHECKOUT OUTDIR [TEST_FILE ...]

1. Runs the test files (default: rms_norm, swiglu, geglu, layer_norm, cross_entropy under test/transformers)
   with plain pytest, then with ``--tilelens`` (the compiled backend, snapshots kept), and compares every
   test's outcome: they must be the same, test by test.
2. Replays every recorded launch on CUDA (``tilelens replay --last --device cuda``): all must ``match``.
3. Writes the first launch's standalone repro folder and runs ``repro.py --device cuda``: it must match.

LIGER_CHECKOUT holds Liger-Kernel's ``src/`` and ``test/`` (its tests need transformers). Logs and the junit
files land in OUTDIR; the last lines printed are the counts the issue's note quotes. Exit 0 when all three
hold, 1 otherwise.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TESTS = [
    f"test/transformers/test_{n}.py" for n in ("rms_norm", "swiglu", "geglu", "layer_norm", "cross_entropy")
]


def outcomes(junit: Path) -> dict[str, str]:
    """Test id → passed / failed / error / skipped, from a pytest junit file."""
    found: dict[str, str] = {}
    for case in ET.parse(junit).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[f"{case.get('classname')}::{case.get('name')}"] = kinds[0] if kinds else "passed"
    return found


def pytest(liger: Path, out: Path, name: str, tests: list[str], *extra: str) -> dict[str, str]:
    junit = out / f"{name}.xml"
    with open(out / f"{name}.log", "w") as log:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={junit}",
                *extra,
                *tests,
            ],
            cwd=liger,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return outcomes(junit)


def _installed() -> bool:
    from importlib import metadata

    try:
        metadata.distribution("tilelens")
    except metadata.PackageNotFoundError:
        return False
    return True


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    liger, out = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    tests = argv[2:] or DEFAULT_TESTS
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(liger / "src"), str(liger), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    work = Path(tempfile.mkdtemp(prefix="tilelens-liger-"))
    where = ["--db", str(work / "h.db"), "--blobs", str(work / "blobs")]
    cli = [sys.executable, "-m", "tilelens.cli", *where]

    plain = pytest(liger, out, "plain", tests)
    plugin = [] if _installed() else ["-p", "tilelens.pytest_plugin"]  # on PYTHONPATH only: no entry point
    traced = pytest(liger, out, "traced", tests, *plugin, "--tilelens", "--tilelens-db", str(work / "h.db"))
    differ = sorted(t for t in plain.keys() | traced.keys() if plain.get(t) != traced.get(t))
    for test in differ:
        print(f"  differs: {test}: plain {plain.get(test)}, traced {traced.get(test)}")
    print(
        f"tests: plain {dict(collections.Counter(plain.values()))}, traced {dict(collections.Counter(traced.values()))}"
    )

    done = subprocess.run(
        [*cli, "replay", "--last", "--device", "cuda", "--json", "--no-store"], capture_output=True, text=True
    )
    (out / "replays.json").write_text(done.stdout)
    (out / "replays.err").write_text(done.stderr)
    replays = json.loads(done.stdout or '{"results": [], "summary": {}}')
    for result in replays["results"]:
        if result["outcome"] != "match":
            message = " ".join(str(result.get("message", "")).split())[:200]
            print(f"  not a match: launch {result['launch_id']} {result['kernel']}: {message}")
    print(f"replays on CUDA of {len(replays['results'])} recorded launches: {replays['summary']}")
    all_match = bool(replays["results"]) and all(r["outcome"] == "match" for r in replays["results"])

    first = min((r["launch_id"] for r in replays["results"]), default=None)
    repro_ok = False
    if first is not None:
        made = subprocess.run(
            [*cli, "repro", str(first), "-o", str(work / "repro")], capture_output=True, text=True
        )
        ran = (
            subprocess.run(
                [sys.executable, "repro.py", "--device", "cuda"],
                cwd=work / "repro",
                capture_output=True,
                text=True,
            )
            if made.returncode == 0
            else made
        )
        (out / "repro.txt").write_text(ran.stdout + ran.stderr)
        print(f"repro.py --device cuda of launch {first}: exit {ran.returncode}: {ran.stdout.strip()}")
        repro_ok = ran.returncode == 0
    print(f"same outcomes: {not differ}; every replay a match: {all_match}; repro matches: {repro_ok}")
    return 0 if not differ and all_match and repro_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
