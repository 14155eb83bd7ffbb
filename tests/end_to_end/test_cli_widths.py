"""Every table at 80, 100, 120 and 200 columns, on a terminal and through a pipe (``COLUMNS`` set): no line
wider than that, no cell cut (``...``, ``…``), no word broken across lines, each key value whole.

The rule is docs/inspecting.md's "Terminal widths" (tilelens.commands.render.fit).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import store_helpers
from tests.end_to_end.conftest import ANSI, Terminal
from tilelens.store import History

WIDTHS = (80, 100, 120, 200)
CONFIG = {"constexprs": {"BLOCK_SIZE": 64, "GROUP_SIZE_M": 8}, "options": {"num_warps": 4, "num_stages": 3}}
LONG_LINE = (
    "    acc = tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0) * scale_factor + "
    "tl.load(y_ptr + offsets, mask=offsets < n_elements, other=0.0)  # the sum of both inputs"
)
SOURCE = f"def softmax_bwd_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE):\n{LONG_LINE}\n    return acc\n"
ARGV = ["pytest", "tests/test_softmax.py", "-k", "backward and float32", "--maxfail", "1", "-q"]


@pytest.fixture
def where(tmp_path: Path, utc: None) -> list[object]:
    softmax = dataclasses.replace(
        store_helpers.kernel("softmax_bwd_kernel", SOURCE), module="liger_kernel.ops.softmax"
    )
    with History.open(str(tmp_path / "h.db"), tmp_path / "blobs") as h:
        run = h.begin_run(dataclasses.replace(store_helpers.run_info(), argv=ARGV))
        h.write_launch(run, store_helpers.launch(k=softmax, seq=0, config=CONFIG))
        h.write_launch(run, store_helpers.launch(seq=1, config={"constexprs": {"BLOCK": 4}}))
    return ["--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs"]


def _lines(
    call: Callable[[], object], width: int, terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(width))
    out = Terminal() if terminal else io.StringIO()
    with contextlib.redirect_stdout(out):
        call()
    return [ANSI.sub("", line).rstrip() for line in out.getvalue().splitlines()]


def _cli(where: list[object], *args: str) -> Callable[[], object]:
    from tilelens.cli import main

    return lambda: main([str(a) for a in [*where, *args]]) == 0 or pytest.fail(f"tilelens {args} failed")


def _check(lines: list[str], width: int, whole: list[str]) -> None:
    """No line over ``width``; no cut marker; every ``whole`` value on one line (a kernel name folds after a
    module dot: its module side is checked as ``liger_kernel.ops.``)."""
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= width, text
    assert "..." not in text and "…" not in text, text
    for value in whole:
        assert any(value in line for line in lines), (value, text)


# Every value below is shorter than 80 columns and breaks at spaces only: each must be found whole.
CONFIG_WORDS = ["BLOCK_SIZE=64", "GROUP_SIZE_M=8", "num_warps=4", "num_stages=3", "BLOCK=4"]


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("width", WIDTHS)
def test_ls_launches(
    where: list[object], width: int, terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _lines(_cli(where, "ls"), width, terminal, monkeypatch)
    _check(lines, width, [*CONFIG_WORDS, "liger_kernel.ops.", "softmax_bwd_kernel", "add_kernel"])
    if width == 200:  # room for the whole names and configs on one line
        assert any("liger_kernel.ops.softmax.softmax_bwd_kernel" in line for line in lines)
        assert any("BLOCK_SIZE=64 GROUP_SIZE_M=8 num_warps=4 num_stages=3" in line for line in lines)


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("width", WIDTHS)
def test_ls_runs(where: list[object], width: int, terminal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _lines(_cli(where, "ls", "--runs"), width, terminal, monkeypatch)
    _check(lines, width, [*ARGV[1:3], "backward", "float32", "--maxfail", "running"])
    time = r"\d\d:\d\d" if width < 120 else r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"  # short below 120 columns
    assert any(re.match(rf" *1  +{time}  +pytest", line) for line in lines), lines
    if width == 200:
        assert any(" ".join(ARGV) in line for line in lines)


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("width", WIDTHS)
def test_show_tables(
    where: list[object], width: int, terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _lines(_cli(where, "show", "1"), width, terminal, monkeypatch)
    _check(lines, width, ["64 B", "16", "x_ptr", "out_ptr", "[16]", "[1]", "unchanged"])
    access = lines[lines.index("memory access") :]
    assert [line.split() for line in access if line.strip().startswith(("x_ptr", "out_ptr"))] == [
        ["x_ptr", "4", "0", "0", "16", "64", "B", "0", "B", "-", "0"],
        ["out_ptr", "0", "4", "0", "16", "0", "B", "64", "B", "-", "0"],
    ]  # each row on one line


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("width", WIDTHS)
def test_show_source(
    where: list[object], width: int, terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _lines(_cli(where, "show", "1", "--source"), width, terminal, monkeypatch)
    source = lines[next(i for i, line in enumerate(lines) if line.startswith("source  ")) + 2 :]
    margin = len(source[0]) - len(source[0].split("| ", 1)[1])  # every code line starts after the margin
    assert all(len(line) > margin and line[margin - 2 : margin] == "| " for line in source), source
    _check(source, width, ["return acc"])
    code = " ".join(line[margin:] for line in source)
    assert code.split() == SOURCE.split()  # every word whole, none lost, in order
    assert len(source) > 3 and source[0].endswith("BLOCK_SIZE):" if width >= 100 else "y_ptr,")


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("width", WIDTHS)
def test_sql(where: list[object], width: int, terminal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    query = (
        "SELECT launch_id, replace(kernel, 'liger_kernel.ops.', '') AS kernel, grid, config, status "
        "FROM launch_overview ORDER BY launch_id"
    )
    lines = _lines(_cli(where, "sql", query), width, terminal, monkeypatch)
    _check(lines, width, ["softmax.softmax_bwd_kernel", "tests.kernels.add_kernel"])
    text = "\n".join(lines)
    for word in ('"BLOCK_SIZE":', '"num_warps":'):
        assert word in text


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("width", WIDTHS)
def test_replay_table(width: int, terminal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from tilelens.commands.replay_report import show_many
    from tilelens.replay.result import ReplayResult

    results = [
        ReplayResult(1, "liger_kernel.ops.softmax.softmax_bwd_kernel", "cuda:0", "compiled", "match", "ok",
                     trace_equal=True, max_abs_err=1.25e-07, duration_s=0.5),
        ReplayResult(2, "examples.vector_add.add_kernel", "cpu", "interpreter", "mismatch", "out differs",
                     trace_equal=False, max_abs_err=0.0625, duration_s=12.25),
    ]  # fmt: skip
    lines = _lines(lambda: show_many(results, False), width, terminal, monkeypatch)
    whole = ["cuda:0", "match", "mismatch", "equal", "differs", "1.25e-07", "0.0625", "12.250"]
    _check(lines, width, [*whole, "liger_kernel.ops.", "softmax_bwd_kernel", "examples."])
    if width >= 100:
        assert any("liger_kernel.ops.softmax.softmax_bwd_kernel" in line for line in lines)


def test_pipe_without_columns_is_not_wrapped(where: list[object], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _cli(where, "show", "1", "--source")()
    assert LONG_LINE in out.getvalue()


def test_a_word_longer_than_the_terminal_makes_a_longer_line(
    where: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What cannot fit is not cut: the row is as wide as its longest word, the terminal wraps it."""
    value = "x" * 120
    lines = _lines(_cli(where, "sql", f"SELECT '{value}' AS v, 1 AS n"), 80, True, monkeypatch)
    assert any(value in line for line in lines), lines
