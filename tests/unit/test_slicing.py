"""The slice of a kernel's file that replay runs (``tilelens.replay.slicing``, loaded by ``scriptload``): the
kernel's definition and, transitively, what it needs, never the rest of a script."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tilelens.replay import scriptload, trust
from tilelens.replay.slicing import kernel_slice

SCRIPT = '''"""A reproduction script: top-level code of every kind around one kernel."""
from __future__ import annotations
import argparse
import functools
import os
import torch
import triton
import triton.language as tl
from helpers import twice, unused

STAGE = os.environ.get("STAGE", "x")
parser = argparse.ArgumentParser()
parser.add_argument("--n", type=int, default=100)
args = parser.parse_args()
SCALE: tl.constexpr = 3
OFFSET = SCALE + 1
CONFIGS = []
for b in (32, 64):
    CONFIGS.append(triton.Config({"BLOCK": b}))
    print("config", b)
if os.environ.get("BIG"):
    WIDTH = 128
else:
    WIDTH = 64
    print("narrow")
EVEN = lambda meta: meta["n"] % WIDTH == 0
ids = [1, 2]


def grid_of(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.heuristics({"EVEN_N": EVEN})
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    vals = [tl.load(x_ptr + offs, mask=offs < n) for _ in range(1)]
    tl.store(x_ptr + offs, twice(vals[0]) + OFFSET, mask=offs < n)


partial_grid = functools.partial(grid_of)
x = torch.zeros(args.n)
with torch.no_grad():
    k[grid_of](x, args.n)
if STAGE == "compiled":
    print("compiled")
small = ids[:1]
if __name__ == "__main__":
    LATE = 1
    print("main")
'''


def _kept(qualname: str = "k", as_main: bool = False) -> tuple[str, object]:
    sliced = kernel_slice(ast.parse(SCRIPT), SCRIPT, qualname, as_main)
    return ast.unparse(ast.Module(body=sliced.body, type_ignores=[])), sliced


def test_the_slice_is_the_kernel_and_what_it_needs_transitively() -> None:
    kept, sliced = _kept()
    for line in (
        "from __future__ import annotations",  # changes how the kept statements compile: kept
        "import triton",
        "import triton.language as tl",
        "from helpers import twice, unused",  # one statement binds both
        "SCALE: tl.constexpr = 3",
        "OFFSET = SCALE + 1",  # read by the kernel's body
        "CONFIGS = []",  # read by the autotune decorator
        "for b in (32, 64):\n    CONFIGS.append(triton.Config({'BLOCK': b}))",  # changes CONFIGS
        "if os.environ.get('BIG'):\n    WIDTH = 128\nelse:\n    WIDTH = 64",  # WIDTH, read by EVEN's body
        "import os",  # read by the if's condition
        "EVEN = lambda meta: meta['n'] % WIDTH == 0",  # read by the heuristics decorator
        "def k(",
    ):
        assert line in kept, line
    for gone in (
        "STAGE",
        "argparse",
        "parser",
        "args",
        "import torch",
        "functools",
        "print(",  # inside the kept for/if, the prints are dropped too
        "def grid_of",  # used by the launch, not by the kernel
        "ids",
        "small",
        "x = torch",
        "LATE",
        '"""A reproduction script',
    ):
        assert gone not in kept, gone
    # vals, _ (the comprehension's own names) and the kernel's locals pull nothing in.
    assert sliced.skipped == [(1, 1), (3, 4), (6, 6), (11, 14), (27, 31), (43, 52)]
    assert sliced.describe("s.py") == (
        "skipped 16 top-level statements of s.py (lines 1, 3-4, 6, 11-14, 27-31, 43-52)"
    )


def test_a_main_guard_counts_only_for_a_kernel_recorded_in_main() -> None:
    source = "import os\nif __name__ == '__main__':\n    N = 3\n    print('x')\ndef k():\n    return N\n"
    as_module = kernel_slice(ast.parse(source), source, "k", as_main=False)
    assert ast.unparse(ast.Module(body=as_module.body, type_ignores=[])) == "def k():\n    return N"
    as_main = kernel_slice(ast.parse(source), source, "k", as_main=True)
    assert ast.unparse(ast.Module(body=as_main.body, type_ignores=[])) == (
        "if True:\n    N = 3\n\ndef k():\n    return N"
    )


def test_a_slice_statement_that_fails_is_named_and_the_rest_still_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    script = tmp_path / "script.py"
    script.write_text(
        f"import os\nX = 3\nY = int(os.environ['TILELENS_NO_SUCH_VARIABLE'])\nopen({str(marker)!r}, 'w').close()\n"
        "def f():\n    return X\n\ndef g():\n    return Y\n"
    )
    loaded = scriptload.load_definitions(trust.read_kernel_file(script, "g"), "g")
    assert loaded.failed == ["line 3: KeyError: 'TILELENS_NO_SUCH_VARIABLE'"]
    assert not marker.exists() and not hasattr(loaded.module, "Y") and callable(loaded.module.g)
    assert loaded.describe() == (
        "skipped 3 top-level statements of script.py (lines 2, 4-6); "
        "line 3: KeyError: 'TILELENS_NO_SUCH_VARIABLE' (not run)"
    )
    other = scriptload.load_definitions(trust.read_kernel_file(script, "f"), "f")
    assert other.module is not loaded.module and other.module.f() == 3 and other.failed == []
    assert other.module.__name__.startswith("tilelens_replay_") and other.module.__file__ == str(script)
    assert sys.modules[other.module.__name__] is other.module
