"""``tilelens coverage`` on the kernels of tests/coverage_kernels.py, recorded with and without line capture.

Every expected line, count and lane below is worked out from the kernels and their launches in
tests/coverage_kernels.py (the comment beside each says how); lines are found by their text.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests import coverage_kernels as ck
from tests.coverage_kernels import Recorded, line_of
from tests.end_to_end.conftest import ROOT, one_line_error, tilelens, tilelens_in_process
from tests.end_to_end.test_serve_browser import Page, browser  # noqa: F401 - the fixture, shared

NAME = "tests.coverage_kernels"


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return ck.record(tmp_path_factory.mktemp("coverage"))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    return ck.record(tmp_path_factory.mktemp("plain"), coverage=False)


def cli(r: Recorded, *args: object):  # noqa: ANN201 - the conftest's Output
    return tilelens_in_process("--db", r.db, "--blobs", r.blobs, "coverage", *args)


def kernel_json(r: Recorded, kernel: str, *args: object) -> dict[str, Any]:
    out = cli(r, "--json", "--kernel", kernel, *args)
    assert out.returncode == 0, out.stderr
    (k,) = json.loads(out.stdout)["kernels"]
    return k


def by_line(k: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {row["line"]: row for row in k["lines"]}


def statuses(k: dict[str, Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for row in k["lines"]:
        if row["status"] is not None:
            out.setdefault(row["status"], []).append(row["line"])
    return out


def lines_between(first: str, last: str) -> list[int]:
    return list(range(line_of(first), line_of(last) + 1))


def test_a_constexpr_branch_never_taken_is_missing(rec: Recorded) -> None:
    k = kernel_json(rec, "constexpr_branch")
    never, taken = line_of("# constexpr never"), line_of("# constexpr taken")
    body = lines_between(
        "offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "tl.store(out_ptr + offs, y"
    )
    assert k["missing"] == [never]
    assert statuses(k) == {"executed": [n for n in body if n not in (never, never - 1)], "missing": [never]}
    assert by_line(k)[never - 1]["status"] is None  # `else:` is no statement
    assert (k["statements"], k["executed_statements"], k["percent"]) == (7, 6, 85.7)
    assert (k["launches"], k["line_launches"], k["tests"]) == (1, 1, 1)
    assert by_line(k)[taken]["launches"] == 1 and by_line(k)[never]["launches"] == 0
    # n=40, BLOCK=16, 3 programs: 48 lanes per access, 40 active; program 2's 8 of 16 make one partial event.
    load = by_line(k)[line_of("x = tl.load(x_ptr + offs, mask=mask)")]
    assert {
        key: load[key] for key in ("events", "lanes", "active_lanes", "masked_lanes", "partial_events")
    } == {
        "events": 3,
        "lanes": 48,
        "active_lanes": 40,
        "masked_lanes": 8,
        "partial_events": 1,
    }
    assert load["masked"] is True and k["boundary"] == []


def test_a_branch_on_a_loaded_value_counts_every_programs_side(rec: Recorded) -> None:
    """flag = [1, 0, 5, 0]: the batched engine gives up at `if flag > 0` (the programs disagree) and the programs
    run one by one; both sides ran, the `flag > 100` side never."""
    ((engine,),) = sqlite3.connect(rec.db).execute(
        "SELECT l.config FROM launches l JOIN kernels k ON k.id = l.kernel_id WHERE k.qualname = 'value_branch'"
    )
    assert json.loads(engine)["engine"] == {"mode": "program", "fallback": "divergent control flow"}
    k = kernel_json(rec, "value_branch")
    never = line_of("# value never")
    assert k["missing"] == [never]
    executed = statuses(k)["executed"]
    assert line_of("# value some") in executed and line_of("# value others") in executed
    assert line_of("if flag > 100:") in executed and line_of("if flag > 0:") in executed
    assert by_line(k)[line_of("# value some")]["events"] == 2  # programs 0 and 2
    assert by_line(k)[line_of("# value others")]["events"] == 2  # programs 1 and 3


def test_a_loop_and_its_partial_last_block(rec: Recorded) -> None:
    k = kernel_json(rec, "loop_sum")
    assert k["missing"] == [] and k["percent"] == 100.0
    assert statuses(k) == {
        "executed": lines_between("acc = tl.zeros([BLOCK]", "tl.store(out_ptr, tl.sum(acc")
    }
    # n=20, BLOCK=8: 3 iterations of 8 lanes, the last with 4 active.
    load = by_line(k)[line_of("# loop load")]
    assert (load["events"], load["lanes"], load["active_lanes"], load["partial_events"]) == (3, 24, 20, 1)
    assert k["boundary"] == []


def test_masks_that_were_always_full_are_boundary_gaps(rec: Recorded) -> None:
    k = kernel_json(rec, "full_tail")
    load = line_of("# full load")
    store = load + 1  # `tl.store(` spans 4 lines; the access is attributed to its first
    assert [
        (g["line"], g["events"], g["full_events"], g["empty_events"], g["launches"]) for g in k["boundary"]
    ] == [
        (load, 6, 6, 0, 2),  # grids 2 and 4: one event per program
        (store, 6, 6, 0, 2),
    ]
    assert k["boundary"][0]["message"] == (
        f"the mask at line {load} was always full: no launch exercised a partial tail"
    )
    assert statuses(k) == {"executed": [load - 1, load, *range(store, store + 5)]}
    assert (k["statements"], k["missing"], k["launches"], k["tests"]) == (3, [], 2, 1)


def test_the_terminal_report(rec: Recorded) -> None:
    out = cli(rec, "--kernel", "full_tail")
    load = line_of("# full load")
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.splitlines() == [
        "Kernel                                     Stmts  Miss  Cover  Launches  Tests  Missing",
        "---------------------------------------------------------------------------------------",
        f"{NAME}.full_tail@{full_tail_sha(rec)}      3     0   100%         2      1",
        f"{NAME}.full_tail@{full_tail_sha(rec)} ({ck.__file__}:{line_of('def full_tail')}):",
        f"  boundary: the mask at line {load} was always full: no launch exercised a partial tail "
        "(6 events in 2 launches)",
        f"    {load}: x = tl.load(x_ptr + offs, mask=offs < n)  # full load",
        f"  boundary: the mask at line {load + 1} was always full: no launch exercised a partial tail "
        "(6 events in 2 launches)",
        f"    {load + 1}: tl.store(",
        "1 kernel version, 2 launches: 3 of 3 statements executed (100%); 2 boundary gaps "
        "(masks never partly active)",
    ]


def full_tail_sha(r: Recorded) -> str:
    ((sha,),) = sqlite3.connect(r.db).execute(
        "SELECT source_sha256 FROM kernels WHERE qualname = 'full_tail'"
    )
    return str(sha)[:8]


def test_whole_history_json_shape_and_missing_column(rec: Recorded) -> None:
    out = cli(rec)
    assert out.returncode == 0
    table = out.stdout.splitlines()
    assert [line.split()[0].split("@")[0] for line in table[2:6]] == [
        f"{NAME}.{k}" for k in ("constexpr_branch", "value_branch", "loop_sum", "full_tail")
    ]
    assert table[2].endswith(f"1  {line_of('# constexpr never')}")
    assert table[-1] == (
        "4 kernel versions, 5 launches: 22 of 24 statements executed (92%); 2 boundary gaps "
        "(masks never partly active)"
    )
    data = json.loads(cli(rec, "--json").stdout)
    assert set(data) == {"filters", "launches", "kernels"}
    assert data["filters"] == {"run": None, "test": None, "kernel": None} and data["launches"] == 5
    k = data["kernels"][0]
    assert set(k) == {
        "kernel_id", "name", "file", "def_line", "source_sha256", "launches", "line_launches", "tests",
        "statements", "executed_statements", "missing", "percent", "lines", "boundary", "helper_events", "notes",
    }  # fmt: skip
    assert set(k["lines"][0]) == {
        "line", "source", "statement", "executed", "status", "launches", "tests", "events", "lanes",
        "active_lanes", "masked_lanes", "partial_events", "full_events", "masked",
    }  # fmt: skip
    assert k["lines"][0]["line"] == k["def_line"] and k["lines"][0]["status"] is None


def test_filters_by_test_run_and_kernel(rec: Recorded) -> None:
    data = json.loads(cli(rec, "--json", "--test", "tests/test_fake.py::test_two").stdout)
    assert [k["name"] for k in data["kernels"]] == [f"{NAME}.loop_sum", f"{NAME}.full_tail"]
    data = json.loads(cli(rec, "--json", "--test", "*test_one", "--run", rec.run_id).stdout)
    assert [k["name"] for k in data["kernels"]] == [f"{NAME}.constexpr_branch", f"{NAME}.value_branch"]
    assert one_line_error(cli(rec, "--run", 999)) == "tilelens: error: no launches to cover for --run 999"
    assert cli(rec, "--run", 999).returncode == 2
    out = cli(rec, "--kernel", "no_such_kernel")
    assert (out.returncode, one_line_error(out)) == (
        2,
        "tilelens: error: no launches to cover for --kernel no_such_kernel",
    )


def test_without_line_capture_only_memory_lines_are_known(plain: Recorded) -> None:
    k = kernel_json(plain, "constexpr_branch")
    # Only the load and the store are known to have run (their memory events); the rest is unknown.
    assert (k["missing"], k["line_launches"], k["executed_statements"], k["percent"]) == (None, 0, 2, None)
    st = statuses(k)
    load, store = (
        line_of("x = tl.load(x_ptr + offs, mask=mask)"),
        line_of("tl.store(out_ptr + offs, y, mask=mask)"),
    )
    assert st["executed"] == [load, store]
    assert line_of("# constexpr never") in st["unknown"] and "missing" not in st
    assert k["notes"] == [
        "1 of 1 launches have no line data (recorded without --coverage or compiled): only their memory lines count"
    ]
    out = cli(plain, "--kernel", "constexpr_branch")
    assert "(no line data)" in out.stdout.splitlines()[2]


def test_the_html_report_in_chromium(browser: object, rec: Recorded, tmp_path: Path) -> None:  # noqa: F811
    folder = tmp_path / "cov"
    out = cli(rec, "--html", folder)
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == f"HTML report: {folder}/index.html"
    assert sorted(p.name for p in folder.iterdir()) == [
        ".tilelens-coverage", "index.html", *sorted(f"kernel-{i}.html" for i in range(1, 5)),
    ]  # fmt: skip
    p = Page(browser, folder.resolve().as_uri())
    p.goto("/index.html")
    assert p.page.title() == "TileLens coverage · TileLens"
    assert p.page.locator("table tr").count() == 1 + 4
    p.follow("a[href='kernel-1.html']")
    assert p.page.title().startswith(f"{NAME}.constexpr_branch@")

    def classes(text: str) -> str:
        return str(p.page.get_attribute(f"tr#line-{line_of(text)}", "class"))

    assert classes("# constexpr never") == "missing"
    assert classes("# constexpr taken") == "executed"
    assert classes("x = tl.load(x_ptr + offs, mask=mask)") == "executed mask-partial"
    assert classes("def constexpr_branch") == ""
    colour = p.page.eval_on_selector(
        f"tr#line-{line_of('# constexpr never')} td:last-child", "td => getComputedStyle(td).backgroundColor"
    )
    assert colour == "rgb(251, 213, 213)"
    p.follow("a[href='index.html']")
    p.follow("a[href='kernel-4.html']")
    assert classes("# full load") == "executed mask-full"
    assert p.page.locator("ul.gaps li").count() == 2
    assert p.errors == [] and all(u.startswith("file:") for u in p.requests)
    p.close()
    # Rerunning replaces the earlier report; a folder that is not one is never replaced.
    assert cli(rec, "--html", folder).returncode == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    out = cli(rec, "--html", other)
    assert out.returncode == 2 and one_line_error(out) == (
        f"tilelens: error: {other} exists and is neither an empty folder nor an earlier coverage report"
    )
    assert (other / "keep.txt").read_text() == "mine"


def executed_lines(r: Recorded) -> list[tuple[str, list[int]]]:
    with sqlite3.connect(r.db) as conn:
        rows = conn.execute(
            "SELECT k.qualname, l.executed_lines FROM launches l JOIN kernels k ON k.id = l.kernel_id ORDER BY l.id"
        ).fetchall()
    return [(name, json.loads(lines)) for name, lines in rows]


def test_the_stock_per_program_loop_sees_the_lines_the_batched_engine_sees(
    rec: Recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TILELENS_ENGINE", "program")
    per_program = ck.record(tmp_path)
    with sqlite3.connect(per_program.db) as conn:
        engines = {json.loads(c)["engine"]["mode"] for (c,) in conn.execute("SELECT config FROM launches")}
    assert engines == {"program"}
    assert executed_lines(per_program) == executed_lines(rec)
    assert [name for name, _ in executed_lines(rec)] == [
        "constexpr_branch", "value_branch", "loop_sum", "full_tail", "full_tail",
    ]  # fmt: skip


def test_accesses_in_a_helper_are_counted_apart(tmp_path: Path) -> None:
    import torch

    import tilelens

    out = torch.zeros(20)
    with tilelens.record(str(tmp_path / "h.db"), tmp_path / "b", coverage=True):
        ck.with_helper[(2,)](torch.arange(20.0), out, 20, BLOCK=16)
    assert torch.equal(out, torch.arange(20.0))
    r = Recorded(tmp_path / "h.db", tmp_path / "b", 1)
    k = kernel_json(r, "with_helper")
    call = line_of("# helper call")
    assert (k["missing"], k["helper_events"]) == ([], 2)  # the helper's load, one event per program
    assert k["notes"] == ["2 memory events at lines outside the kernel function (its helpers)"]
    assert by_line(k)[call]["status"] == "executed" and by_line(k)[call]["events"] == 0
    assert k["boundary"] == []  # the store's tail (program 1: 4 of 16) was partly active


@pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="3.12+ captures through sys.monitoring, beside any tracer"
)
def test_a_launch_under_another_tracer_runs_as_ever_and_says_why_it_has_no_lines(tmp_path: Path) -> None:
    import torch

    import tilelens

    calls: list[str] = []

    def tracer(frame: object, event: str, arg: object) -> None:
        calls.append(event)

    out = torch.zeros(40)
    previous = sys.gettrace()
    with tilelens.record(str(tmp_path / "h.db"), tmp_path / "b", coverage=True):
        sys.settrace(tracer)
        try:
            ck.constexpr_branch[(3,)](torch.arange(40.0), out, 40, BLOCK=16, DOUBLE=True)
        finally:
            sys.settrace(previous)
    assert torch.equal(out, 2 * torch.arange(40.0)) and calls  # computed as ever; the tracer kept its calls
    ((lines, config),) = sqlite3.connect(tmp_path / "h.db").execute(
        "SELECT executed_lines, config FROM launches"
    )
    assert lines is None
    assert json.loads(config)["line_capture"] == (
        "line capture unavailable: another tracer (a debugger or coverage tool) is active"
    )


def test_every_database_backend_gives_the_same_coverage(history_url: str, tmp_path: Path) -> None:
    """SQLite and PostgreSQL (migration 0016's JSON column, the filters' SQL) read back the same lines."""
    r = ck.record(tmp_path, db=history_url)
    k = kernel_json(r, "constexpr_branch", "--test", "test_one")
    assert k["missing"] == [line_of("# constexpr never")] and k["line_launches"] == 1
    gaps = kernel_json(r, "full_tail", "--run", r.run_id)["boundary"]
    assert [g["line"] for g in gaps] == [line_of("# full load"), line_of("# full load") + 1]


def test_hostile_source_is_escaped_in_html(rec: Recorded, tmp_path: Path) -> None:
    from tilelens.analysis.coverage import CoverageReport, KernelCoverage, LineCoverage
    from tilelens.reporters.coverage_html import write_coverage_html

    evil = "<script>alert(1)</script>\x1b[31m"
    k = KernelCoverage(7, evil, evil, 1, "ab" * 32, 1, 1, 0, 1, 1, [], [LineCoverage(1, evil, 1, True)], [])
    write_coverage_html(CoverageReport([k], 1, {"kernel": evil}), tmp_path / "h")
    for name in ("index.html", "kernel-7.html"):
        text = (tmp_path / "h" / name).read_text()
        assert "<script>" not in text and "\x1b" not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[31m" in text


TESTS = """
import torch
from tests import coverage_kernels as ck


def test_copy():
    x = torch.arange(40.0)
    out = torch.zeros(40)
    ck.constexpr_branch[(3,)](x, out, 40, BLOCK=16, DOUBLE=True)
    assert torch.equal(out, 2 * x)
"""


def test_pytest_plugin_prints_coverage_and_writes_the_html(tmp_path: Path) -> None:
    (tmp_path / "test_c.py").write_text(textwrap.dedent(TESTS))
    folder = tmp_path / "covhtml"
    argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tilelens.pytest_plugin"]
    argv += [f"--tilelens-db={tmp_path / 'h.db'}", f"--tilelens-coverage={folder}", "test_c.py"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TILELENS_BLOBS": str(tmp_path / "blobs")}
    proc = subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    never = line_of("# constexpr never")
    row = next(line for line in out.splitlines() if line.startswith(f"{NAME}.constexpr_branch@"))
    assert row.split()[1:] == ["7", "1", "86%", "1", "1", str(never)]
    assert "1 kernel version, 1 launch: 6 of 7 statements executed (86%); 0 boundary gaps" in out
    assert f"HTML report: {folder}/index.html" in out
    assert (folder / "index.html").is_file() and (folder / "kernel-1.html").is_file()
    ((lines, nodeid),) = sqlite3.connect(tmp_path / "h.db").execute(
        "SELECT executed_lines, test_nodeid FROM launches"
    )
    assert never not in json.loads(lines) and nodeid == "test_c.py::test_copy"


def test_record_coverage_flag_keeps_the_lines(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom tests import coverage_kernels as ck\nck.launch_all()\n"
    )
    db = tmp_path / "h.db"
    proc = tilelens("--db", db, "--blobs", tmp_path / "b", "record", "--coverage", script)
    assert proc.returncode == 0, proc.stderr
    got = dict(
        sqlite3.connect(db).execute(
            "SELECT k.qualname, l.executed_lines FROM launches l JOIN kernels k ON k.id = l.kernel_id "
            "WHERE k.qualname IN ('constexpr_branch', 'loop_sum')"
        )
    )
    assert line_of("# constexpr taken") in json.loads(got["constexpr_branch"])
    assert line_of("# constexpr never") not in json.loads(got["constexpr_branch"])
    assert json.loads(got["loop_sum"]) == lines_between(
        "acc = tl.zeros([BLOCK]", "tl.store(out_ptr, tl.sum(acc"
    )
