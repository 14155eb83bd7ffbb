"""``tilelens ls``: launches and runs, newest first, filtered; the --json schema is pinned here."""

from __future__ import annotations

import json

import pytest

from tests.end_to_end.conftest import Recorded

# Documented in docs/inspecting.md ("JSON output"); adding a key is fine, renaming or removing one is not.
LAUNCH_KEYS = [
    "id",
    "run_id",
    "seq",
    "started_at",
    "duration_s",
    "kernel",
    "module",
    "qualname",
    "grid",
    "config",
    "tuning_key",
    "role",
    "status",
    "error",
    "backend",
    "device",
    "lanes",
    "active_lanes",
    "oob_lanes",
    "bytes_loaded",
    "bytes_stored",
    "test_nodeid",
    "oob_load_lanes",
    "oob_store_lanes",
    "dropped_lanes",
]
RUN_KEYS = [
    "id",
    "started_at",
    "finished_at",
    "status",
    "exit_code",
    "tag",
    "argv",
    "cwd",
    "host",
    "launches",
    "kernels",
    "errors",
    "oob_lanes",
    "parent_run_id",
    "pid",
]


def ls_json(h: Recorded, *args: object) -> list[dict]:
    out = h.main("ls", "--json", *args)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_ls_table_newest_first(examples_history: Recorded) -> None:
    proc = examples_history.cli("ls")
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines() if line.strip()]
    assert lines[0][:4] == ["id", "time", "kernel", "grid"]
    body = [line for line in lines if line[0].isdigit()]
    assert [int(line[0]) for line in body] == sorted(
        (i for v in examples_history.ids.values() for i in v), reverse=True
    )
    oob = next(line for line in body if "oob_bug.shift_kernel" in line)
    assert oob[4:7] == ["(4,", "1,", "1)"] and "BLOCK_SIZE=64" in oob and "456" in oob and "56" in oob
    trials = [line for line in body if "(autotune-trial)" in line]
    assert len(trials) == 2


def test_ls_json_schema_and_values(examples_history: Recorded) -> None:
    rows = ls_json(examples_history)
    assert len(rows) == 8
    for row in rows:
        assert list(row) == LAUNCH_KEYS
    oob = next(r for r in rows if r["qualname"] == "shift_kernel")
    assert oob["kernel"] == "oob_bug.shift_kernel"
    assert oob["grid"] == [4, 1, 1]
    assert oob["config"]["constexprs"] == {"BLOCK_SIZE": 64}
    assert (oob["lanes"], oob["active_lanes"], oob["oob_lanes"]) == (512, 456, 56)
    # The 56 stray lanes are loads, inside x's parent storage: read, nothing dropped.
    assert (oob["oob_load_lanes"], oob["oob_store_lanes"], oob["dropped_lanes"]) == (56, 0, 0)
    assert oob["started_at"].endswith("+00:00")
    assert [r["id"] for r in rows] == sorted((r["id"] for r in rows), reverse=True)


@pytest.mark.parametrize(
    ("args", "qualnames"),
    [
        (["--kernel", "shift_kernel"], ["shift_kernel"]),
        (["--kernel", "softmax.softmax_kernel"], ["softmax_kernel"]),
        (["--kernel", "*scale*"], ["scale_kernel", "scale_kernel"]),
        (["--kernel", "no_such_kernel"], []),
        (["--oob"], ["shift_kernel"]),
        (["--status", "error"], []),
        (["--status", "ok", "--limit", "2"], ["shift_kernel", "scale_kernel"]),
        (["--tag", "examples", "--kernel", "matmul_kernel"], ["matmul_kernel"] * 3),
        (["--tag", "other"], []),
    ],
)
def test_ls_filters(examples_history: Recorded, args: list[str], qualnames: list[str]) -> None:
    assert [r["qualname"] for r in ls_json(examples_history, *args)] == qualnames


def test_ls_by_run(examples_history: Recorded) -> None:
    rows = ls_json(examples_history, "--run", examples_history.run_id, "-n", "3")
    assert len(rows) == 3 and {r["run_id"] for r in rows} == {examples_history.run_id}
    assert ls_json(examples_history, "--run", 999) == []


def test_ls_runs(examples_history: Recorded) -> None:
    (run,) = ls_json(examples_history, "--runs")
    assert list(run) == RUN_KEYS
    assert run["id"] == examples_history.run_id
    assert (run["status"], run["exit_code"], run["tag"]) == ("ok", 0, "examples")
    assert (run["launches"], run["kernels"], run["errors"], run["oob_lanes"]) == (8, 5, 0, 56)
    assert run["argv"][0].endswith("run_all.py")
    assert ls_json(examples_history, "--runs", "--status", "failed") == []
    assert [r["id"] for r in ls_json(examples_history, "--runs", "--oob", "--kernel", "shift_kernel")] == [
        examples_history.run_id
    ]
    table = examples_history.main("ls", "--runs")
    assert "run_all.py --ignored" in table.stdout and "examples" in table.stdout


def test_ls_empty_and_bad_status(examples_history: Recorded) -> None:
    assert "no launches match" in examples_history.main("ls", "--kernel", "nothing").stdout
    assert "no runs match" in examples_history.main("ls", "--runs", "--tag", "nothing").stdout
    bad = examples_history.main("ls", "--status", "failed")  # a run status, not a launch status
    assert bad.returncode == 2 and "ok, error" in bad.stderr
