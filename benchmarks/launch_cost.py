"""What a recorded compiled launch costs the program's CPU beyond its instructions (issue 15), without a GPU.

Instruction counts alone mislead here. On this machine's stand-in step (``tilelens.core.native_training``'s: four
autotuned launches and one plain launch a step, a stand-in for Triton's run) recording adds ~9 % instructions a
launch, yet the program's thread spent 19-40 % more CPU time in this machine's runs; on the H200 the real
launch-bound step spent 12-25 % more while TileLens's own C++ took ~4 µs of a 55-65 µs launch. The difference is the cache and the
branch predictor. Between two launches the program runs ~60 k instructions of Python, torch and Triton, which
evict TileLens's code and data from the first-level caches: nearly every cache line TileLens touches a launch
is a miss, and its code evicts lines the program's own code then misses on.

This runs the stand-in step under callgrind with cache and branch simulation (caches sized like the H200
host's Sapphire Rapids cores: 32 KiB L1i, 48 KiB L1d, 2 MiB L2 as the last level) and reports per launch,
untraced and recorded: instructions (Ir), L1 instruction misses (I1mr), L1 data read and write misses (D1mr,
D1mw), last-level misses (LLm), mispredicted conditional and indirect branches (Bcm, Bim), and a cycle
estimate from them (:func:`estimated_cycles`). Callgrind counts deterministically, so two code versions can
be compared on a noisy host; the estimate's weights are typical latencies, not this host's. What it models is
a single core's caches and branch predictor without a TLB, so it ranks changes to TileLens's own code well and
changes to object lifetimes badly: a prototype that kept 16 launches' objects alive to check them in a batch
counted ~32 % fewer added cycles here and cost ~35 % more added CPU on the H200 (BENCHMARKS.md, 2026-12-02, the
floor). A change of that kind needs the H200's paired samples, not this count.

Only the timed loop is counted: the child calls ``os.sched_yield()`` before it (callgrind zeroes its counts
there: ``--zero-before``) and ``os.getppid()`` after it (callgrind writes them out: ``--dump-before``);
nothing else in the child calls either. Only the program's main thread counts (callgrind's thread 1, with
``--separate-threads``): torch starts a thread at import whose work grows with the wall clock, so under
valgrind's slowness it had added 20-50 k instructions "a launch" to the untraced loop, differently in each
run. The recorded run's feeder thread (``writer_process``) is not counted either.

    python -m benchmarks.launch_cost [steps]      # needs valgrind; ~10 minutes for 100 steps
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LAUNCHES_PER_STEP = 5  # native_training.stand_in_step
WARM_STEPS = 20  # before the counted loop: templates made, caches of TileLens and Triton filled
VARIANTS = ("untraced", "recorded")
# L1 instruction, L1 data and last-level caches: size, associativity, line (Sapphire Rapids, per core)
CACHES = ("--I1=32768,8,64", "--D1=49152,12,64", "--LL=2097152,16,64")
EVENTS = ("Ir", "I1mr", "D1mr", "D1mw", "LLm", "Bcm", "Bim")
# Cycles an event costs in the estimate: an instruction at 3 a cycle, an L1 miss served by L2, a last-level
# miss served by memory, a mispredicted branch. Typical of recent x86 cores; the ranking, not the total, is
# what the estimate is for.
WEIGHTS = {"Ir": 1 / 3, "I1mr": 14.0, "D1mr": 14.0, "D1mw": 14.0, "LLm": 200.0, "Bcm": 17.0, "Bim": 17.0}


@dataclass(frozen=True)
class Cost:
    """Callgrind's counts for ``launches`` launches; :meth:`per_launch` divides them."""

    counts: dict[str, int]
    launches: int

    def per_launch(self) -> dict[str, float]:
        return {name: self.counts[name] / self.launches for name in EVENTS}


def parse_counts(text: str) -> dict[str, int]:
    """The ``events:`` and ``summary:`` (or ``totals:``) lines of a callgrind output file, as
    :data:`EVENTS`: last-level misses summed (ILmr + DLmr + DLmw), the rest as named. Callgrind writes events
    it did not simulate as absent, so every name in :data:`EVENTS` must be there: a file without cache or
    branch simulation is an error, not zeros."""
    names: list[str] | None = None
    values: list[int] | None = None
    for line in text.splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith(("summary:", "totals:")) and values is None:
            values = [int(v) for v in line.split()[1:]]
    if names is None or values is None:
        raise ValueError("not a callgrind output file (no events: or summary: line)")
    raw = dict(zip(names, values + [0] * (len(names) - len(values))))
    missing = {"Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw", "Bcm", "Bim"} - set(raw)
    if missing:
        raise ValueError(
            f"callgrind did not simulate {sorted(missing)} (run with --cache-sim and --branch-sim)"
        )
    counts = {name: raw[name] for name in ("Ir", "I1mr", "D1mr", "D1mw", "Bcm", "Bim")}
    counts["LLm"] = raw["ILmr"] + raw["DLmr"] + raw["DLmw"]
    return counts


def estimated_cycles(per_launch: dict[str, float]) -> float:
    """Cycles a launch costs by :data:`WEIGHTS` (an estimate: out-of-order execution hides part of each
    miss, and the host's caches are shared with its other tenants)."""
    return sum(WEIGHTS[name] * per_launch[name] for name in EVENTS)


def command(variant: str, steps: int, out: Path) -> list[str]:
    """The callgrind command that runs the child for ``variant``; ``out`` gets one file per dump."""
    return [
        "valgrind",
        "--tool=callgrind",
        "--cache-sim=yes",
        "--branch-sim=yes",
        "--separate-threads=yes",
        *CACHES,
        "--zero-before=os_sched_yield*",
        "--dump-before=os_getppid*",
        f"--callgrind-out-file={out}.%p",
        sys.executable,
        "-m",
        "benchmarks.launch_cost",
        "--child",
        variant,
        str(steps),
    ]


def measure(variant: str, steps: int = 100) -> Cost:
    """Run the child under callgrind; the counts of its main thread's timed loop (exactly one dump before
    the end: callgrind names it ``cg.PID.1-01``, part 1 of thread 1)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}")
    if shutil.which("valgrind") is None:
        raise RuntimeError("valgrind is not installed (apt-get install valgrind)")
    env = dict(os.environ, PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).parent.parent), env.get("PYTHONPATH")) if p
    )
    with tempfile.TemporaryDirectory(prefix="tilelens-launch-cost-") as name:
        folder = Path(name)
        cmd = command(variant, steps, folder / "cg")
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"the {variant} child failed:\n{done.stderr[-3000:]}")
        dumps = sorted(folder.glob("cg.*.1-01")) + sorted(folder.glob("cg.*.2-01"))
        if len(dumps) != 1:
            raise RuntimeError(f"expected one dump of the timed loop, found {[p.name for p in dumps]}")
        return Cost(parse_counts(dumps[0].read_text()), steps * LAUNCHES_PER_STEP)


def _counted(step: Callable[[], None], steps: int) -> None:
    """``WARM_STEPS`` uncounted steps, then ``steps`` between the markers callgrind acts on."""
    for _ in range(WARM_STEPS):
        step()
    os.sched_yield()  # --zero-before
    for _ in range(steps):
        step()
    os.getppid()  # --dump-before


def child(variant: str, steps: int) -> int:
    """The counted program: ``steps`` stand-in steps, untraced or recorded (compiled, ``snapshots="none"``),
    between ``os.sched_yield()`` and ``os.getppid()``. Both run with the stand-in for Triton's own
    ``JITFunction.run`` (``native_training.stand_in_triton_run``), so the recorded launches take the path they
    take on a GPU (the launcher calling Triton's run with the call's own arguments), the path the module's
    profile-guided build is trained on. Returns the launches recorded (0 untraced)."""
    import tilelens
    from tilelens.core.native_training import stand_in_step, stand_in_triton_run

    step = stand_in_step()
    with stand_in_triton_run():
        if variant == "untraced":
            _counted(step, steps)
            return 0
        with tempfile.TemporaryDirectory(prefix="tilelens-launch-cost-") as name:
            folder = Path(name)
            rec = tilelens.Recording(str(folder / "h.db"), folder / "b", backend="compiled", snapshots="none")
            with rec:
                _counted(step, steps)
            return len(rec.launch_ids)


def report(costs: dict[str, Cost]) -> str:
    """A table of the per-launch counts by variant; with both variants, what recording adds and the ratio
    recorded/untraced of each event and of the estimate."""
    per = {variant: cost.per_launch() for variant, cost in costs.items()}
    lines = [f"{'per launch':<12}" + "".join(f"{name:>10}" for name in (*EVENTS, "~cycles"))]
    for variant, values in per.items():
        row = [values[name] for name in EVENTS] + [estimated_cycles(values)]
        lines.append(f"{variant:<12}" + "".join(f"{v:>10.0f}" for v in row))
    if set(per) == set(VARIANTS):
        u, r = per["untraced"], per["recorded"]
        extra = [r[name] - u[name] for name in EVENTS] + [estimated_cycles(r) - estimated_cycles(u)]
        lines.append(f"{'added':<12}" + "".join(f"{v:>+10.0f}" for v in extra))
        base = [u[name] for name in EVENTS] + [estimated_cycles(u)]
        lines.append(
            f"{'ratio':<12}"
            + "".join(f"{(b + e) / b if b else float('nan'):>10.3f}" for b, e in zip(base, extra))
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``[steps]``: measure both variants and print :func:`report`; ``--child VARIANT STEPS``: the program
    callgrind runs (:func:`child`)."""
    if argv[:1] == ["--child"]:
        child(argv[1], int(argv[2]))
        return 0
    steps = int(argv[0]) if argv else 100
    costs = {variant: measure(variant, steps) for variant in VARIANTS}
    print(f"stand-in step under callgrind, {steps} steps ({steps * LAUNCHES_PER_STEP} launches) a variant")
    print(report(costs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
