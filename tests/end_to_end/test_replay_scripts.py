"""Replaying kernels defined in ordinary scripts: whatever else the script does at top level, replay loads the
slice the kernel needs (``tilelens.replay.slicing``) and matches, without running the rest again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.end_to_end.conftest import tilelens as run_cli

HELPERS = """import triton
import triton.language as tl


@triton.jit
def twice(x):
    return x * 2


@triton.jit
def plus(x, y):
    return twice(x) + y
"""

SCRIPT = '''"""Top-level code of every kind around four kernels."""
import argparse
import os
import sys

import torch
import triton
import triton.language as tl

from helpers import plus

STAGE = os.environ.get("STAGE", "x")
parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=100)
args = parser.parse_args()
SCALE: tl.constexpr = 3
MARK = {marker!r}
with open(MARK, "a") as f:
    f.write("ran\\n")
CONFIGS = []
for block in (32, 64):
    CONFIGS.append(triton.Config({{"BLOCK": block}}))
if STAGE == "compiled":
    print("compiled")


@triton.jit
def plain(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    for _ in range(0, tl.cdiv(n, n)):  # once, counted by a runtime scalar: Triton 3.6's __index__ on numpy 2.4
        tl.store(x_ptr + offs, plus(tl.load(x_ptr + offs, mask=m), SCALE), mask=m)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def tuned(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) * SCALE, mask=m)


@triton.heuristics({{"EVEN": lambda meta: meta["n"] % 64 == 0}})
@triton.jit
def guessed(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)
    else:
        m = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 2, mask=m)


x = torch.arange(args.n, dtype=torch.float32)
ids = [1, 2]
for i in range(2):
    plain[(triton.cdiv(args.n, 64),)](x, args.n, BLOCK=64)
tuned[lambda meta: (triton.cdiv(args.n, meta["BLOCK"]),)](x, args.n)
with torch.no_grad():
    guessed[(triton.cdiv(args.n, 32),)](x, args.n, BLOCK=32)
small = ids[:1]
print("done", float(x.sum()), small, file=sys.stderr)
'''


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("scripts")
    (folder / "helpers.py").write_text(HELPERS)
    marker = folder / "ran.txt"
    (folder / "s.py").write_text(SCRIPT.format(marker=str(marker)))
    proc = run_cli(
        "--db", folder / "h.db", "--blobs", folder / "blobs", "record", "s.py", "--n", "96", cwd=folder
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert marker.read_text() == "ran\n"
    return folder, marker


def test_every_kernel_of_an_ordinary_script_replays_and_nothing_else_runs(
    recorded: tuple[Path, Path],
) -> None:
    folder, marker = recorded
    env = {k: v for k, v in os.environ.items() if k != "STAGE"}
    proc = run_cli(
        "--db", folder / "h.db", "--blobs", folder / "blobs", "replay", "--last", "--json", cwd=folder
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout)["results"]
    assert [(r["kernel"], r["outcome"]) for r in results] == [
        ("__main__.plain", "match"),
        ("__main__.plain", "match"),
        ("__main__.tuned", "match"),
        ("__main__.guessed", "match"),
    ]
    assert all(r["trace_equal"] for r in results)
    assert marker.read_text() == "ran\n"  # the file's own statements did not run again
    assert env  # replay's argv (--last --json) never reached the script's argparse: not in the slice
    # plain needs SCALE and plus (from helpers); tuned its CONFIGS loop; guessed its heuristics lambda.
    skipped = {r["skipped"] for r in results}
    assert all(s.startswith("skipped ") and "of s.py" in s for s in skipped)


def test_a_statement_the_kernel_needs_that_fails_names_its_line(recorded: tuple[Path, Path]) -> None:
    folder, _ = recorded
    script = folder / "needs_env.py"
    script.write_text(
        "import os\nimport torch\nimport triton\nimport triton.language as tl\n"
        "FACTOR = float(os.environ['TILELENS_TEST_FACTOR'])\n"
        "@triton.jit\ndef scaled(x_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.arange(0, BLOCK)\n    m = offs < n\n"
        "    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) * FACTOR, mask=m)\n"
        "x = torch.ones(16)\nscaled[(1,)](x, 16, BLOCK=16)\n"
    )
    where = ("--db", folder / "env.db", "--blobs", folder / "env-blobs")
    env = dict(os.environ, TILELENS_TEST_FACTOR="2.5")
    import subprocess

    from tests.end_to_end.conftest import tilelens_argv

    proc = subprocess.run(
        [*tilelens_argv(), *map(str, where), "record", "needs_env.py"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    proc = run_cli(*where, "replay", "--last", "--json", cwd=folder)  # the variable is not set here
    (result,) = json.loads(proc.stdout)["results"]
    assert result["outcome"] == "error"
    assert (
        "could not run what the kernel needs: line 5: KeyError: 'TILELENS_TEST_FACTOR'" in result["message"]
    )
    assert proc.returncode == 2


def test_with_its_files_gone_the_bundle_replays_under_trust_source_only(
    recorded: tuple[Path, Path], tmp_path: Path
) -> None:
    """The kernel and its jit helper from another module, as the record's bundle keeps them: replayed with
    --from-history --trust-source once both files are gone, refused without."""
    import shutil

    folder, _ = recorded
    copy = tmp_path / "moved"
    shutil.copytree(folder, copy)
    (copy / "s.py").unlink()
    (copy / "helpers.py").unlink()
    where = ("--db", folder / "h.db", "--blobs", folder / "blobs")
    proc = run_cli(*where, "replay", "1", "--json", cwd=tmp_path)  # the recorded s.py still exists in folder
    assert json.loads(proc.stdout)["outcome"] == "match"
    gone = ("--db", copy / "h.db", "--blobs", copy / "blobs")
    import sqlite3

    with sqlite3.connect(copy / "h.db") as conn:  # the history now names files that do not exist
        conn.execute("UPDATE kernels SET file = ?", (str(copy / "s.py"),))
    conn.close()
    proc = run_cli(*gone, "replay", "1", "--json", cwd=tmp_path)
    assert proc.returncode == 2 and "does not exist" in json.loads(proc.stdout)["message"]
    proc = run_cli(*gone, "replay", "1", "--from-history", "--trust-source", "--json", cwd=tmp_path)
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["outcome"] == "match", result["message"]
    assert result["message"].startswith("recorded source; launch 1 (__main__.plain)")
