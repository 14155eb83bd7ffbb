"""``tilelens diff``: two launches (or two kernel versions) compared; exit 0 same, 1 different, 2 error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.end_to_end.conftest import one_line_error, tilelens, tilelens_in_process

# Launches 1 and 2: the same kernel, inputs and config. 3: BLOCK=64 (2 programs instead of 4). 4: the script
# edited so that the kernel's store masks off element 99, and run again: the traces part at program 3's store
# (event 7), and out[99] differs.
SCRIPT = """
import torch, triton, triton.language as tl

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 2, mask=mask)

def run(block):
    x = torch.arange(100, dtype=torch.float32)
    out = torch.zeros(100)
    scale_kernel[(triton.cdiv(100, block),)](x, out, 100, BLOCK=block)

for block in BLOCKS:
    run(block)
"""
EDITED = "tl.store(out_ptr + offs, x * 2, mask=offs < n - 1)"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> list[object]:
    folder = tmp_path_factory.mktemp("diff")
    script = folder / "scale.py"
    db = folder / "h.db"
    first = SCRIPT.replace("BLOCKS", "(32, 32, 64)")
    edited = SCRIPT.replace("BLOCKS", "(32,)").replace("tl.store(out_ptr + offs, x * 2, mask=mask)", EDITED)
    for text in (first, edited):
        script.write_text(text)
        proc = tilelens("--db", db, "--blobs", folder / "blobs", "record", script)
        assert proc.returncode == 0, proc.stderr
    return ["--db", db, "--blobs", folder / "blobs"]


def _json(where: list[object], *args: object) -> tuple[int, dict]:
    out = tilelens_in_process(*where, "diff", *args, "--json")
    assert out.returncode in (0, 1), out.stderr
    return out.returncode, json.loads(out.stdout)


def test_identical_launches_are_the_same(recorded: list[object]) -> None:
    code, d = _json(recorded, 1, 2)
    assert code == 0 and d["same"] is True
    assert (d["launch"], d["config"], d["args"], d["source_diff"]) == ([], [], [], [])
    assert d["outputs"] == [
        {"position": 1, "name": "out_ptr", "same": True, "bit_exact": True, "elements": None, "differing": 0,
         "first_index": None, "first_a": None, "first_b": None, "max_abs_err": None, "max_rel_err": None,
         "note": None},
    ]  # fmt: skip
    assert d["trace"] == {"same": True, "events_a": 8, "events_b": 8, "first": None, "note": None}
    text = tilelens_in_process(*recorded, "diff", 1, 2)
    assert text.returncode == 0 and text.stdout.splitlines()[0] == "launches 1 and 2: same"


def test_a_different_config_is_named(recorded: list[object]) -> None:
    code, d = _json(recorded, 1, 3)
    assert code == 1 and d["same"] is False
    assert d["config"] == [{"name": "constexprs.BLOCK", "a": 32, "b": 64}]
    assert d["launch"] == [{"name": "grid", "a": [4, 1, 1], "b": [2, 1, 1]}]
    assert d["args"] == [{"name": "BLOCK.value", "a": 32, "b": 64}]
    assert d["outputs"][0]["same"] is True  # the same result, computed in other blocks
    first = d["trace"]["first"]
    assert (first["index"], first["pid"], first["op"], first["field"], first["a"], first["b"]) == (
        0, [0, 0, 0], "load", "lanes", 32, 64,
    )  # fmt: skip
    text = tilelens_in_process(*recorded, "diff", 1, 3)
    assert text.returncode == 1
    assert "  config     constexprs.BLOCK: 32 -> 64" in text.stdout.splitlines()


def test_an_edited_kernel_shows_its_source_diff_and_the_first_differing_event(recorded: list[object]) -> None:
    code, d = _json(recorded, 1, 4)
    assert code == 1 and d["source_sha_a"] != d["source_sha_b"]
    changed = [line for line in d["source_diff"] if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == [
        "-    tl.store(out_ptr + offs, x * 2, mask=mask)",
        f"+    {EDITED}",
    ]
    (out,) = d["outputs"]
    assert (out["elements"], out["differing"], out["first_index"]) == (100, 1, [99])
    assert (out["first_a"], out["first_b"], out["max_abs_err"], out["max_rel_err"]) == (
        198.0,
        0.0,
        198.0,
        1.0,
    )
    first = d["trace"]["first"]  # program 3's store (events: load, store per program), its mask
    assert (first["index"], first["pid"], first["op"], first["line"], first["field"]) == (
        7, [3, 0, 0], "store", 10, "mask",
    )  # fmt: skip
    # Program 3 covers elements 96..127: its lane 3 (element 99) was stored, and is masked off after the edit.
    assert (first["lane"], first["lane_a"], first["lane_b"]) == (
        3, {"offset": 99, "active": True, "oob": False}, {"offset": 99, "active": False, "oob": False},
    )  # fmt: skip
    text = tilelens_in_process(*recorded, "diff", 1, 4).stdout
    assert "+    tl.store(out_ptr + offs, x * 2, mask=offs < n - 1)" in text
    assert "out_ptr: 1 of 100 elements differ; first [99]: 198.0 -> 0.0" in text
    assert "first difference at event 7: pid (3, 0, 0) store line 10, mask:" in text
    assert "first lane that differs: 3: offset 99 active -> offset 99 masked off" in text


def test_two_kernel_versions_side_by_side(recorded: list[object]) -> None:
    _, one = _json(recorded, 1, 1)
    _, four = _json(recorded, 4, 4)
    sha_a, sha_b = one["source_sha_a"], four["source_sha_a"]
    code, d = _json(recorded, "--kernel", "scale_kernel", "--source-sha", sha_a[:8], sha_b[:6].upper())
    assert code == 1 and d["same"] is False
    assert (d["a"]["source_sha256"], d["b"]["source_sha256"]) == (sha_a, sha_b)
    # v1: 3 launches, 10 programs, 800 bytes each (400 loaded, 400 stored); v2: 4 programs, 400 + 396 bytes.
    assert (d["a"]["launches"], d["a"]["programs"], d["a"]["bytes_per_program"]) == (3, 10, 240.0)
    assert (d["b"]["launches"], d["b"]["programs"], d["b"]["bytes_per_program"]) == (1, 4, 199.0)
    assert (d["a"]["active_lanes"], d["b"]["active_lanes"], d["a"]["oob_lanes"]) == (600, 199, 0)
    assert "bytes_per_program" in d["differs"] and "oob_lanes" not in d["differs"]
    same, d = _json(recorded, "--kernel", "scale_kernel", "--source-sha", sha_a[:8], sha_a[:10])
    assert same == 0 and d["same"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1, 99), "no launch 99 in history"),
        (("one", 2), "launch id must be an integer, not 'one'"),
        (("--kernel", "scale_kernel", 1, 2), "--kernel NAME and --source-sha go together"),
        (("--kernel", "nope", "--source-sha", "ab", "cd"), "no kernel named 'nope'"),
        (
            ("--kernel", "scale_kernel", "--source-sha", "zz", "cd"),
            "source sha 'zz' is not a hexadecimal prefix",
        ),
        (("--kernel", "scale_kernel", "--source-sha", "", "cd"), "source sha '' is not a hexadecimal prefix"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(recorded: list[object], args: tuple, message: str) -> None:
    assert message in one_line_error(tilelens_in_process(*recorded, "diff", *args))


def test_the_command_exits_like_diff(recorded: list[object], tmp_path: Path) -> None:
    assert [tilelens(*recorded, "diff", a, b).returncode for a, b in ((2, 1), (1, 4), (1, 0))] == [0, 1, 2]
