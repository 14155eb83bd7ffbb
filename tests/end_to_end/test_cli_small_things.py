"""Issue 48's small things: ``ls --test`` alone lists the tests, ``ls --runs`` names what a ``python -c``
child (an xdist worker) belongs to, ``show --last-oob``, and counts with their nouns in the right number."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests import store_helpers
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tilelens.commands.render import counted
from tilelens.store import History

ADD = "tests/test_add.py::test_add[float32]"
MUL = "tests/test_mul.py::test_mul"


def _oob(rec: object, lanes: int) -> object:
    summary = dataclasses.replace(rec.summary, oob_lanes=lanes, oob_load_lanes=lanes)  # type: ignore[attr-defined]
    return dataclasses.replace(rec, summary=summary)  # type: ignore[call-overload]


@pytest.fixture
def where(tmp_path: Path) -> list[object]:
    session = dataclasses.replace(store_helpers.run_info(), argv=["pytest", "-n", "2", "tests/"])
    with History.open(str(tmp_path / "h.db"), tmp_path / "blobs") as h:
        parent = h.begin_run(session)
        worker = h.begin_run(dataclasses.replace(store_helpers.run_info(), argv=["-c"], parent_run_id=parent))
        other = h.begin_run(dataclasses.replace(store_helpers.run_info(), argv=["-c"]))
        h.write_launch(worker, store_helpers.launch(seq=0, test_nodeid=ADD))  # 1
        h.write_launch(worker, _oob(store_helpers.launch(seq=1, test_nodeid=ADD), 1))  # 2: one lane out
        h.write_launch(worker, store_helpers.launch(seq=2, test_nodeid=MUL))  # 3
        h.write_launch(other, store_helpers.launch(seq=0))  # 4: no test
        h.write_launch(other, _oob(store_helpers.launch(seq=1), 7))  # 5: the newest out of bounds
        h.write_launch(other, store_helpers.launch(seq=2))  # 6
    return ["--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs"]


def test_ls_test_without_a_pattern_lists_the_tests(where: list[object]) -> None:
    out = tilelens_in_process(*where, "ls", "--test")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.strip().startswith("tests/")]
    assert rows == [[MUL, "1", "1", "0", "0", "3"], [ADD, "2", "1", "0", "1", "2"]]
    listed = json.loads(tilelens_in_process(*where, "ls", "--test", "--oob", "--json").stdout)
    assert listed == [
        {"nodeid": ADD, "launches": 1, "kernels": 1, "errors": 0, "oob_lanes": 1, "last_launch": 2}
    ]
    # a pattern, and options after a bare --test, mean what they did
    assert [
        r["id"] for r in json.loads(tilelens_in_process(*where, "ls", "--test", "mul", "--json").stdout)
    ] == [3]
    assert len(json.loads(tilelens_in_process(*where, "ls", "--test", "--limit", "1", "--json").stdout)) == 1


def test_a_python_c_child_names_its_parent_and_its_command(where: list[object]) -> None:
    out = tilelens_in_process(*where, "ls", "--runs")
    commands = [line.split(None, 3) for line in out.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [c[0] for c in commands] == ["3", "2", "1"]
    assert "-c  " in out.stdout  # run 3: no parent, shown as recorded
    assert "pytest-xdist worker of run 1: pytest -n 2 tests/" in out.stdout
    # the parent outside the listed rows is still named
    only = tilelens_in_process(*where, "ls", "--runs", "--run", "2")
    assert "pytest-xdist worker of run 1: pytest -n 2 tests/" in only.stdout


def test_show_last_oob(where: list[object]) -> None:
    last = tilelens_in_process(*where, "show", "--last-oob")
    assert last.returncode == 0, last.stderr
    assert last.stdout == tilelens_in_process(*where, "show", "5").stdout
    assert "  oob        7 lanes out of bounds (7 loaded, 0 stored)" in last.stdout.splitlines()
    one = tilelens_in_process(*where, "show", "2").stdout.splitlines()
    assert "  oob        1 lane out of bounds (1 loaded, 0 stored)" in one  # one lane, one noun
    assert one_line_error(tilelens_in_process(*where, "show")) == (
        "tilelens: error: show takes a launch ID or --last-oob (one of them)"
    )
    assert "one of them" in one_line_error(tilelens_in_process(*where, "show", "5", "--last-oob"))


def test_show_last_oob_without_any(tmp_path: Path) -> None:
    with History.open(str(tmp_path / "h.db"), tmp_path / "blobs") as h:
        h.write_launch(h.begin_run(store_helpers.run_info()), store_helpers.launch())
    out = tilelens_in_process("--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs", "show", "--last-oob")
    assert one_line_error(out) == "tilelens: error: no launch of this history went out of bounds"


def test_counts_have_their_nouns_in_the_right_number() -> None:
    assert [counted(n, "launch", "launches") for n in (0, 1, 2, 1234)] == [
        "0 launches", "1 launch", "2 launches", "1,234 launches",
    ]  # fmt: skip
    assert counted(1, "out-of-bounds lane") == "1 out-of-bounds lane"
