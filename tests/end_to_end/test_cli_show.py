"""``tilelens show``: one launch in full; the --json schema is pinned here."""

from __future__ import annotations

import json

import pytest

from tests.end_to_end.conftest import Recorded, one_line_error
from tests.end_to_end.test_cli_ls import LAUNCH_KEYS

DETAIL_KEYS = LAUNCH_KEYS + [
    "run",
    "kernel_info",
    "summary",
    "args",
    "unattributed",
    "trace",
    "trace_error",
    "oob_events",
    "oob_event_count",
    "autotune",
    "replays",
    "source_lines",
]
RUN_KEYS = ["id", "tag", "status", "argv"]
KERNEL_KEYS = ["name", "id", "module", "qualname", "file", "def_line", "cache_key", "source_sha256"]
SUMMARY_KEYS = [
    "loads",
    "stores",
    "atomics",
    "load_lanes",
    "store_lanes",
    "atomic_lanes",
    "bytes_loaded",
    "bytes_stored",
    "oob_lanes",
    "events",
    "lanes",
    "oob_load_lanes",
    "oob_store_lanes",
    "dropped_lanes",
]
ARG_KEYS = [
    "position",
    "name",
    "kind",
    "dtype",
    "shape",
    "strides",
    "storage_offset",
    "storage_group",
    "device",
    "value",
    "before_blob",
    "after_blob",
    "access",
    "snapshot_elements",
    "changed",
]
ACCESS_KEYS = [
    "loads",
    "stores",
    "atomics",
    "load_lanes",
    "store_lanes",
    "atomic_lanes",
    "active_lanes",
    "bytes_loaded",
    "bytes_stored",
    "oob_lanes",
    "distinct_elements",
]
OOB_EVENT_KEYS = [
    "pid",
    "event",
    "op",
    "arg",
    "arg_name",
    "line",
    "source_text",
    "lanes",
    "active",
    "oob_lanes",
    "offsets",
    "stray_lanes",
]
AUTOTUNE_KEYS = ["id", "tuning_key", "configs", "timings", "chosen", "cache_hit", "created_at"]
SOURCE_LINE_KEYS = ["line", "text", "load_lanes", "store_lanes", "atomic_lanes", "oob_lanes"]


def show_json(h: Recorded, launch_id: int, *args: object) -> dict:
    out = h.main("show", launch_id, "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def oob_launch(h: Recorded) -> int:
    (launch_id,) = h.ids["shift_kernel"]
    return launch_id


def test_show_json_schema_and_the_out_of_bounds_bug(examples_history: Recorded) -> None:
    d = show_json(examples_history, oob_launch(examples_history), "--source")
    assert list(d) == DETAIL_KEYS
    assert list(d["run"]) == RUN_KEYS and d["run"]["tag"] == "examples"
    assert list(d["kernel_info"]) == KERNEL_KEYS
    assert d["kernel_info"]["name"] == d["kernel"] == "oob_bug.shift_kernel"
    assert d["kernel_info"]["file"].endswith("examples/oob_bug.py") and d["kernel_info"]["def_line"] == 13
    assert list(d["summary"]) == SUMMARY_KEYS and d["summary"]["oob_lanes"] == 56
    assert [a["name"] for a in d["args"]] == ["x_ptr", "out_ptr", "n", "BLOCK_SIZE"]
    for a in d["args"]:
        assert list(a) == ARG_KEYS
    x, out, n, block = d["args"]
    assert list(x["access"]) == ACCESS_KEYS
    # x: 4 programs x 64 lanes loaded, the 56 past its 200 elements out of bounds; 200 distinct elements.
    assert (x["access"]["load_lanes"], x["access"]["oob_lanes"], x["access"]["distinct_elements"]) == (
        256,
        56,
        200,
    )
    assert (out["access"]["store_lanes"], out["access"]["distinct_elements"], out["changed"]) == (
        200,
        200,
        True,
    )
    assert (n["kind"], n["value"], n["access"]) == ("scalar", 200, None)
    assert (block["kind"], block["value"]) == ("constexpr", 64)
    assert list(d["trace"]) == ["blob", "rows", "bytes"]
    assert d["oob_event_count"] == 1
    (event,) = d["oob_events"]
    assert list(event) == OOB_EVENT_KEYS
    assert event["pid"] == [3, 0, 0] and (event["op"], event["arg_name"], event["line"]) == (
        "load",
        "x_ptr",
        15,
    )
    assert (event["oob_lanes"], event["offsets"], event["stray_lanes"]) == (56, [200, 255], 0)
    assert event["source_text"].strip().startswith("x = tl.load(x_ptr + offsets)")
    lines = {s["line"]: s for s in d["source_lines"]}
    assert list(lines[15]) == SOURCE_LINE_KEYS
    assert (lines[15]["load_lanes"], lines[16]["store_lanes"], lines[14]["load_lanes"]) == (256, 200, 0)
    assert [s["line"] for s in d["source_lines"] if s["oob_lanes"]] == [15] and lines[15]["oob_lanes"] == 56
    assert lines[13]["text"].startswith("def shift_kernel(")


def test_show_without_source_has_null_source_lines(examples_history: Recorded) -> None:
    assert show_json(examples_history, examples_history.ids["add_kernel"][0])["source_lines"] is None


def test_show_text(examples_history: Recorded) -> None:
    launch_id = oob_launch(examples_history)
    proc = examples_history.cli("show", launch_id, "--source")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert f"launch {launch_id}  oob_bug.shift_kernel  run {examples_history.run_id} (tag examples)" in text
    for expected in (
        "examples/oob_bug.py:13",
        "grid       (4, 1, 1)",
        "config     BLOCK_SIZE=64",
        "56 lanes out of bounds (56 loaded, 0 stored)",
        "out-of-bounds events (first 1 of 1)",
        "pid (3, 0, 0)  load x_ptr  line 15: 56 of 64 active lanes outside, element offsets 200..255 "
        "(x_ptr has 200 elements)",
        "200 of 200",
    ):
        assert expected in text, expected
    margin = {line.split("|")[0].lstrip("!").split()[0]: line for line in text.splitlines() if " | " in line}
    # the out-of-bounds line is marked in the margin (red too, where colour is on); no other line is
    assert margin["15"].startswith("!   15") and margin["15"].split("|")[0].split() == ["!", "15", "256"]
    assert [n for n, line in margin.items() if line.startswith("!")] == ["15"]
    assert text.endswith("  ! a line with out-of-bounds lanes\n")
    assert margin["16"].split("|")[0].split() == ["16", "200"]
    assert margin["16"].split("|")[1].strip().startswith("tl.store(out_ptr + offsets")


def test_show_source_colours_the_out_of_bounds_line_red(
    examples_history: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich colours a pipe too
    monkeypatch.delenv("NO_COLOR", raising=False)
    res = examples_history.main("show", oob_launch(examples_history), "--source")
    assert res.returncode == 0, res.stderr
    (line15,) = [line for line in res.stdout.splitlines() if "!   15" in line]
    assert line15.startswith("\x1b[1;31m!   15") and "31m    x = tl.load(x_ptr + offsets)" in line15
    (line16,) = [line for line in res.stdout.splitlines() if "    16 " in line]
    assert "31m" not in line16


def test_show_autotuned_launch(examples_history: Recorded) -> None:
    trial, _, chosen = examples_history.ids["matmul_kernel"]
    d = show_json(examples_history, chosen)
    (decision,) = d["autotune"]
    assert list(decision) == AUTOTUNE_KEYS
    assert len(decision["configs"]) == 2 and decision["chosen"]["kwargs"] == d["config"]["constexprs"]
    assert d["tuning_key"] == decision["tuning_key"]
    text = examples_history.main("show", chosen).stdout
    assert "autotune  chose BLOCK_M=32 BLOCK_N=32 BLOCK_K=32" in text and "among 2 configs" in text
    assert show_json(examples_history, trial)["role"] == "autotune-trial"


def test_show_unknown_launch(examples_history: Recorded) -> None:
    line = one_line_error(examples_history.cli("show", 424242))
    assert line == f"tilelens: error: no launch 424242 in history {examples_history.db}"
