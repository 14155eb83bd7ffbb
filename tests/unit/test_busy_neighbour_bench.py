"""``benchmarks.busy_neighbour``: its neighbours run only during their own samples, really work then, and are
gone afterwards; ``measure`` pairs every sample as it says. Timings are not asserted (BENCHMARKS.md has them)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from benchmarks import busy_neighbour


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _rows(folder: Path) -> int:
    with sqlite3.connect(folder / "neighbour.db") as db:
        (n,) = db.execute("SELECT count(*) FROM t").fetchone()
    return int(n)


def test_a_neighbour_runs_only_while_resumed_and_is_gone_after_the_block() -> None:
    with busy_neighbour.Neighbours() as neighbours:
        pids = {kind: p.pid for kind, p in neighbours.processes.items()}
        assert sorted(pids) == ["spin", "sqlite"]
        assert {kind: _state(pid) for kind, pid in pids.items()} == {"spin": "T", "sqlite": "T"}
        rows = _rows(neighbours.folder)
        spun = _cpu_ticks(pids["spin"])
        time.sleep(0.2)
        assert _rows(neighbours.folder) == rows and _cpu_ticks(pids["spin"]) == spun  # paused: no work
        for kind in ("spin", "sqlite"):
            neighbours.resume(kind)
        time.sleep(0.5)
        assert _state(pids["spin"]) == "R"
        assert _cpu_ticks(pids["spin"]) > spun
        assert _rows(neighbours.folder) >= rows + busy_neighbour.ROWS_A_TRANSACTION
        for kind in ("spin", "sqlite"):
            neighbours.pause(kind)
        processes = list(neighbours.processes.values())
    assert all(p.returncode is not None for p in processes)


def test_measure_pairs_every_sample_with_the_alone_ones_around_it() -> None:
    states: list[set[str]] = []
    neighbours_seen: list[busy_neighbour.Neighbours] = []
    original = busy_neighbour.Neighbours.__enter__

    def enter(self: busy_neighbour.Neighbours) -> busy_neighbour.Neighbours:
        neighbours_seen.append(self)
        return original(self)

    durations = iter([1.0, 2.0, 1.0, 3.0, 1.0, 1.5, 1.0] + [1.0] * 20)

    def sample() -> float:
        (neighbours,) = neighbours_seen
        states.append({kind for kind, p in neighbours.processes.items() if _state(p.pid) != "T"})
        return next(durations)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(busy_neighbour.Neighbours, "__enter__", enter)
        got = busy_neighbour.measure(sample, rounds=3)
    # before, then (beside, after) per round: spin, sqlite, spin.
    assert states == [set(), {"spin"}, set(), {"sqlite"}, set(), {"spin"}, set()]
    assert got["spin"]["n"] == 2 and got["sqlite"]["n"] == 1 and got["alone"]["n"] == 3
    assert got["sqlite"]["median"] == 3.0  # 3.0 against the mean of 1.0 and 1.0
    assert got["spin"]["median"] == pytest.approx((2.0 + 1.5) / 2)
    assert got["alone"]["median"] == 1.0
    assert "sqlite: median 3.000" in busy_neighbour.report(got)


def test_an_unknown_neighbour_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="neighbours are spin, sqlite, not disk"):
        busy_neighbour.Neighbours(("spin", "disk"))
