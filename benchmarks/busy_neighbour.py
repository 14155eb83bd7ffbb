"""What a busy process on another core costs an untraced launch-bound program (issue 15), nothing recorded.

A compiled recording's writer is a process of its own, busy 40-50 % of the time at the launch-bound step
(~25 µs of CPU a 50-60 µs launch). ``benchmarks.cost_split`` found that writing and feeding cost the program
1-2 points beyond the launching thread's own work. This measures the part of that any neighbour costs on the
host, TileLens or not: the untraced step timed alone and beside a neighbour process, alternating, each sample
against the alone samples on either side of it.

Neighbours (each paused with SIGSTOP except during its own samples, all ended afterwards):

* ``spin``: a pure-Python busy loop, no memory traffic to speak of: what a busy core alone costs (the host's
  clocks and scheduling);
* ``sqlite``: a process inserting rows into a WAL-mode SQLite file in transactions of 200 rows, as the writer
  does: a busy core with the writer's kind of work.

``pin``: each neighbour pinned to one CPU of its own (the highest ones the program may use), the program
left where the scheduler puts it.

    python -m benchmarks.busy_neighbour [--rounds N] [--pin]      # the GPU bench's step (needs CUDA)
    python -m benchmarks.busy_neighbour --sqlite FOLDER            # the sqlite neighbour itself
"""

from __future__ import annotations

import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

KINDS = ("spin", "sqlite")
ROWS_A_TRANSACTION = 200
SETTLE_S = 0.002  # after a neighbour resumes, before the sample: it is running when the timing starts


def sqlite_main(folder: Path) -> int:
    """The ``sqlite`` neighbour: inserts rows into ``folder/neighbour.db`` until it is ended."""
    db = sqlite3.connect(folder / "neighbour.db")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, n INTEGER, name TEXT, x REAL, note TEXT)"
    )
    print("ready", flush=True)  # the parent waits for this line before it first pauses this process
    n = 0
    while True:
        with db:
            db.executemany(
                "INSERT INTO t (n, name, x, note) VALUES (?, ?, ?, ?)",
                [(n + i, f"arg{i % 11}", 0.5 * i, None) for i in range(ROWS_A_TRANSACTION)],
            )
        n += ROWS_A_TRANSACTION


class Neighbours:
    """The neighbour processes of ``kinds``, started paused; :meth:`resume` and :meth:`pause` one by kind.
    Ended (resumed, killed, waited for) when the block ends, also on error."""

    def __init__(self, kinds: tuple[str, ...] = KINDS, pin: bool = False) -> None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"neighbours are {', '.join(KINDS)}, not {', '.join(sorted(unknown))}")
        self.kinds, self.pin = kinds, pin
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    @property
    def folder(self) -> Path:
        assert self._folder is not None
        return Path(self._folder.name)

    def __enter__(self) -> Neighbours:
        self._folder = tempfile.TemporaryDirectory(prefix="tilelens-neighbour-")
        cpus = sorted(os.sched_getaffinity(0), reverse=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        try:
            for i, kind in enumerate(self.kinds):
                if kind == "spin":
                    command = [sys.executable, "-c", "while True: pass"]
                else:
                    command = [
                        sys.executable,
                        "-m",
                        "benchmarks.busy_neighbour",
                        "--sqlite",
                        str(self.folder),
                    ]
                process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE)
                self.processes[kind] = process
                if self.pin:
                    os.sched_setaffinity(process.pid, {cpus[i % len(cpus)]})
                if kind == "sqlite":
                    assert process.stdout is not None
                    if process.stdout.readline() != b"ready\n":
                        raise RuntimeError(
                            f"the sqlite neighbour did not start (exit status {process.wait()})"
                        )
            time.sleep(0.2)  # running before it is first paused
            for kind in self.kinds:
                self.pause(kind)
        except BaseException:
            self._end()
            raise
        return self

    def resume(self, kind: str) -> None:
        """Returns once the neighbour runs again (signals are asynchronous: waited for, as its parent)."""
        pid = self.processes[kind].pid
        os.kill(pid, signal.SIGCONT)
        os.waitpid(pid, os.WCONTINUED)

    def pause(self, kind: str) -> None:
        """Returns once the neighbour is stopped, so no alone sample overlaps its work."""
        pid = self.processes[kind].pid
        os.kill(pid, signal.SIGSTOP)
        os.waitpid(pid, os.WUNTRACED)

    def __exit__(self, *exc: object) -> None:
        self._end()

    def _end(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
            process.wait(timeout=30)
            if process.stdout is not None:
                process.stdout.close()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "q1": ordered[len(ordered) // 4],
        "q3": ordered[(3 * len(ordered)) // 4],
    }


def measure(
    sample: Callable[[], float], rounds: int = 150, kinds: tuple[str, ...] = KINDS, pin: bool = False
) -> dict[str, dict[str, float]]:
    """Per neighbour kind, its samples' ratios to the mean of the alone samples on either side; ``alone``:
    each alone sample against the alone sample before it (the host's own noise). ``sample()`` times the
    program's work (seconds). Rounds cycle through ``kinds``."""
    ratios: dict[str, list[float]] = {kind: [] for kind in ("alone", *kinds)}
    with Neighbours(kinds, pin) as neighbours:
        before = sample()
        for i in range(rounds):
            kind = kinds[i % len(kinds)]
            neighbours.resume(kind)
            time.sleep(SETTLE_S)
            beside = sample()
            neighbours.pause(kind)
            after = sample()
            ratios[kind].append(beside / ((before + after) / 2))
            ratios["alone"].append(after / before)
            before = after
    return {kind: _summary(values) for kind, values in ratios.items()}


def report(results: dict[str, dict[str, float]]) -> str:
    return "\n".join(
        f"  {kind}: median {r['median']:.3f} (q1 {r['q1']:.3f}, q3 {r['q3']:.3f}; {r['n']:.0f} samples)"
        for kind, r in results.items()
    )


def main(argv: list[str]) -> int:
    import argparse

    if len(argv) == 2 and argv[0] == "--sqlite":
        return sqlite_main(Path(argv[1]))
    parser = argparse.ArgumentParser(prog="python -m benchmarks.busy_neighbour")
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--pin", action="store_true", help="each neighbour on a CPU of its own")
    args = parser.parse_args(argv)
    import torch

    from benchmarks.compiled_step import _wall_and_cpu, warmed_launch_bound_step

    step = warmed_launch_bound_step()

    def sample() -> float:
        wall: float = _wall_and_cpu(step.run, args.steps, torch.cuda.synchronize)[0]
        return wall

    where = "pinned, each to a CPU of its own" if args.pin else "where the scheduler puts them"
    print(f"the untraced launch-bound step beside a busy neighbour ({where}), {args.rounds} rounds:")
    print(report(measure(sample, args.rounds, pin=args.pin)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
