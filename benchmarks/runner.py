"""Measuring the workloads: stock interpreter vs recorded (persisted), trace size, CPU replay.

Stock and recorded samples alternate, so drift of a shared machine hits both alike, and the minimum over the
samples is reported. One recorded sample is ``burst`` launches back to back; every launch is fully written to the
history (blobs, rows, commit) before it returns, so persistence is inside the clock.
The process must run with TRITON_INTERPRET=1 so that the stock interpreter can run nested @jit helpers.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from benchmarks.workloads import Case
from tilelens.core.patches import compiled_semantics
from tilelens.core.recording.recording import Recording
from tilelens.store import History
from tilelens.store.sql.models import Launch


@dataclass
class Result:
    workload: str
    shape: str
    source: str
    samples: int
    stock_s: float
    recorded_s: float
    launches: int
    lanes: int
    trace_bytes: int
    replay_s: float | None = None
    notes: list[str] = field(default_factory=list)
    engine: str = ""  # how the measured launches were interpreted (batched, or per program and why)

    @property
    def ratio(self) -> float:
        return self.recorded_s / self.stock_s

    @property
    def bytes_per_lane(self) -> float:
        return self.trace_bytes / self.lanes if self.lanes else 0.0

    @property
    def replay_ratio(self) -> float | None:
        return None if self.replay_s is None else self.replay_s / self.recorded_s

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ratio=self.ratio, bytes_per_lane=self.bytes_per_lane, replay_ratio=self.replay_ratio)
        return out


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(case: Case, history: History, samples: int, burst: int) -> Result:
    notes: list[str] = []
    with Recording(history=history, argv=["bench", case.name]) as rec:
        try:
            case.run()  # warm-up: identity, AST rewrite, first allocation
        except Exception as exc:
            if case.fallback is None:
                raise
            notes.append(
                f"{case.source} could not be recorded ({type(exc).__name__}: {exc}); used the kernel written here"
            )
            case = case.fallback()
            case.run()
        baseline = _stock_baseline(rec, case, notes)
        stock, recorded = [], []
        first_sample_launch = len(rec.launch_ids)
        for _ in range(samples):
            with rec.paused(), baseline():
                stock.append(_timed(lambda: [case.run() for _ in range(burst)]) / burst)

            def recorded_burst() -> None:
                for _ in range(burst):
                    case.run()

            recorded.append(_timed(recorded_burst) / burst)
        per_sample = (len(rec.launch_ids) - first_sample_launch) // (samples * burst)
        last_ids = rec.launch_ids[-per_sample:]
    with history.session() as s:
        rows = s.scalars(select(Launch).where(Launch.id.in_(last_ids))).all()
        lanes = sum(r.lanes for r in rows)
        engines = sorted({_engine(r.config) for r in rows})
        trace_bytes = sum(r.trace_bytes or 0 for r in rows)
    result = Result(
        workload=case.workload,
        shape=case.shape,
        source=case.source,
        samples=samples,
        stock_s=min(stock),
        recorded_s=min(recorded),
        launches=per_sample,
        lanes=lanes,
        trace_bytes=trace_bytes,
        notes=notes,
        engine="; ".join(engines),
    )
    result.replay_s = _replay_time(history, last_ids, samples, notes)
    return result


def _engine(config: Any) -> str:
    """How a launch was interpreted: "batched", or "program (<why it fell back>)"."""
    if isinstance(config, str):
        import json

        config = json.loads(config)
    engine = (config or {}).get("engine") or {}
    mode = engine.get("mode", "?")
    return mode if mode == "batched" else f"{mode} ({engine.get('fallback', '?')})"


def _stock_baseline(rec: Recording, case: Case, notes: list[str]) -> Any:
    """Triton's own interpreter; for kernels it cannot run, the interpreter with TileLens's semantic fixes."""
    try:
        with rec.paused():
            case.run()
        return contextlib.nullcontext
    except Exception as exc:
        notes.append(
            f"the stock interpreter cannot run it ({type(exc).__name__}: {exc}); its baseline is the "
            "interpreter with TileLens's compiled-Triton semantics, without recording"
        )
        with rec.paused(), compiled_semantics():
            case.run()
        return compiled_semantics


def _replay_time(history: History, launch_ids: list[int], samples: int, notes: list[str]) -> float | None:
    """Best time, over as many samples as recording takes, to replay one sample's launches on the CPU, in a warm
    process (as ``tilelens replay --run`` does for a batch: kernels resolved and traced once), comparison and
    replay rows included."""
    from tilelens.replay import KernelResolver, replay_launch

    resolver = KernelResolver()
    for lid in launch_ids:  # warm-up: import, identity, AST rewrite
        replay_launch(history, lid, device="cpu", resolver=resolver)
    best = None
    for _ in range(samples):
        t0 = time.perf_counter()
        for lid in launch_ids:
            outcome = replay_launch(history, lid, device="cpu", resolver=resolver)
            if outcome.outcome != "match":
                notes.append(f"replay of launch {lid}: {outcome.outcome}: {outcome.message}")
        elapsed = time.perf_counter() - t0
        best = elapsed if best is None else min(best, elapsed)
    return best


def run_suite(cases: list[Case], where: Path, samples: int, burst: int, progress: Any = None) -> list[Result]:
    results = []
    with History.open(db=str(where / "bench.db"), blobs=str(where / "blobs")) as history:
        for case in cases:
            if progress is not None:
                progress(case)
            results.append(measure(case, history, samples, burst))
    return results
