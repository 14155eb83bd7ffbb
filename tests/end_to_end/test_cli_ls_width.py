"""``tilelens ls`` laid out for the terminal's width: the exact table at 80 and at 200 columns."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from tests import store_helpers
from tests.end_to_end.conftest import ANSI, Terminal
from tilelens.commands.ls_table import fold_name, short_time
from tilelens.store import History

UTC = dt.timezone.utc
OLD = dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
CONFIG = {"constexprs": {"BLOCK_SIZE": 1024, "GROUP_M": 8}, "options": {"num_warps": 4, "num_stages": 3}}


@pytest.fixture
def history(tmp_path: Path, utc: None) -> tuple[list[object], dt.datetime]:
    now = dt.datetime.now(UTC).replace(microsecond=0)
    add = dataclasses.replace(store_helpers.kernel("add_kernel"), module="examples.vector_add")
    softmax = dataclasses.replace(
        store_helpers.kernel("softmax_bwd_kernel", "def softmax_bwd_kernel(): ..."),
        module="liger_kernel.ops.softmax",
    )
    with History.open(str(tmp_path / "h.db"), tmp_path / "blobs") as h:
        run = h.begin_run(store_helpers.run_info())
        h.write_launch(
            run, store_helpers.launch(k=add, started_at=OLD, seq=0, config={"constexprs": {"BLOCK": 4}})
        )
        h.write_launch(run, store_helpers.launch(k=softmax, started_at=now, seq=1, config=CONFIG))
    return ["--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs"], now


def _ls(where: list[object], columns: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from tilelens.cli import main

    monkeypatch.setenv("COLUMNS", str(columns))
    out = Terminal()
    with contextlib.redirect_stdout(out):
        assert main([str(a) for a in [*where, "ls"]]) == 0
    return [ANSI.sub("", line).rstrip() for line in out.getvalue().splitlines()]


def test_ls_at_80_columns(history: tuple[list[object], dt.datetime], monkeypatch: pytest.MonkeyPatch) -> None:
    where, now = history
    lines = _ls(where, 80, monkeypatch)
    # Today's launch at HH:MM, last year's by date; long names folded after a module dot, the config too.
    assert lines == [
        "id  time        kernel                grid  config           active  oob  status",
        "─" * 80,
        f" 2  {now:%H:%M}       liger_kernel.ops.     4     BLOCK_SIZE=1024      32    0  ok",
        "                softmax.                    GROUP_M=8",
        "                softmax_bwd_kernel          num_warps=4",
        "                                            num_stages=3",
        " 1  2025-03-04  examples.vector_add.  4     BLOCK=4              32    0  ok",
        "                add_kernel",
    ]


def test_ls_at_200_columns(
    history: tuple[list[object], dt.datetime], monkeypatch: pytest.MonkeyPatch
) -> None:
    where, now = history
    lines = _ls(where, 200, monkeypatch)
    head = " id   time                  kernel                                        grid        config"
    assert lines == [
        "",
        head + " " * 47 + "active lanes   oob lanes   status",
        " " + "─" * 171,
        f"  2   {now:%Y-%m-%d %H:%M:%S}   liger_kernel.ops.softmax.softmax_bwd_kernel   (4, 1, 1)   "
        "BLOCK_SIZE=1024 GROUP_M=8 num_warps=4 num_stages=3             32           0   ok",
        "  1   2025-03-04 05:06:07   examples.vector_add.add_kernel                (4, 1, 1)   BLOCK=4"
        + " " * 56
        + "32           0   ok",
        "",
    ]


def test_short_times_and_names() -> None:
    now = dt.datetime(2026, 11, 30, 18, 30, tzinfo=UTC)
    assert [short_time(t, now) for t in (now, dt.datetime(2026, 1, 2, 3, 4, tzinfo=UTC), OLD, None)] == [
        "18:30", "01-02 03:04", "2025-03-04", "-",
    ]  # fmt: skip
    name = "examples.vector_add.add_kernel"
    assert [fold_name(name, "add_kernel", w) for w in (30, 29, 21, 20, 19, 3)] == [
        (name,), ("examples.vector_add.", "add_kernel"), ("examples.vector_add.", "add_kernel"),
        ("examples.vector_add.", "add_kernel"), ("examples.", "vector_add.", "add_kernel"),
        ("examples.", "vector_add.", "add_kernel"),
    ]  # fmt: skip
    assert "".join(fold_name("a.b.c.k", "k", 2)) == "a.b.c.k"  # nothing of the name is left out
