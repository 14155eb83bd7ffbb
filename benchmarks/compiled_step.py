"""The compiled-recording benchmark: a multi-kernel step at LLM-like shapes on a CUDA device.

One step is a stack of ``layers`` transformer-MLP blocks in bf16 — Liger RMSNorm, an autotuned Triton matmul
(gate and up projections), Liger SwiGLU, the down projection — and a Liger cross-entropy over the vocabulary at
the end, forward only: ``5 * layers + 2`` launches per step (the last two the vocabulary's matmul and the loss).

Per shape :func:`run` measures, in one process:

* ``snapshots="none"`` against untraced, the verdict's estimate (:func:`interleaved`), once with the native
  accessor and once with the Python capture (``TILELENS_NATIVE=0``), side by side;
* sustained ``snapshots="all"`` (:func:`sustained`): blocks of recorded steps between untraced blocks, each
  block's time against the untraced ones around it (p50, p99, worst), the launches whose snapshots the
  writer's full backlog dropped, and the writer's sustained MB/s;
* ``snapshots="all"`` over one step against the device-to-host bandwidth of pinned copies, and the time
  ``tilelens trace`` takes per launch (on a small step: traces are derived in the CPU interpreter);
* with ``references=True``, two reference interpositions paired the same way
  (``benchmarks.reference_wrappers``): a do-nothing Python wrapper, and the least Python capture.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BM": 128, "BN": 128, "BK": 64, "GROUP": 8}, num_warps=8, num_stages=3),
        triton.Config({"BM": 128, "BN": 256, "BK": 64, "GROUP": 8}, num_warps=8, num_stages=3),
        triton.Config({"BM": 64, "BN": 128, "BK": 64, "GROUP": 8}, num_warps=4, num_stages=4),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def bf16_matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr
):
    pid = tl.program_id(0)
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * num_n)
    first_m = group * GROUP
    size_m = tl.minimum(num_m - first_m, GROUP)
    pid_m = first_m + (pid % size_m)
    pid_n = (pid % (GROUP * num_n)) // size_m
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(
            a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K)
        )
        b = tl.load(
            b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N)
        )
        acc = tl.dot(a, b, acc)
    tl.store(
        c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N)
    )


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
    bf16_matmul_kernel[lambda m: (triton.cdiv(M, m["BM"]) * triton.cdiv(N, m["BN"]),)](a, b, c, M, N, K)
    return c


# The bench's launch-bound shape (tokens, hidden, intermediate, vocabulary, layers): its kernels take less time
# than launching them, so the program's launch loop paces the step.
LAUNCH_BOUND = (2048, 1024, 2816, 32000, 8)


class Step:
    """Weights and inputs of one step; ``run()`` launches it (asynchronously)."""

    def __init__(
        self, tokens: int, hidden: int, inter: int, vocab: int, layers: int, device: str = "cuda"
    ) -> None:
        g = torch.Generator(device=device).manual_seed(0)

        def randn(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, device=device, generator=g) * 0.02).to(torch.bfloat16)

        self.x = randn(tokens, hidden) * 50
        self.norm_w = [torch.ones(hidden, device=device, dtype=torch.bfloat16) for _ in range(layers)]
        self.w_gate = [randn(hidden, inter) for _ in range(layers)]
        self.w_up = [randn(hidden, inter) for _ in range(layers)]
        self.w_down = [randn(inter, hidden) for _ in range(layers)]
        self.w_vocab = randn(hidden, vocab)
        self.target = torch.randint(0, vocab, (tokens,), device=device, generator=g)
        self.shape = dict(tokens=tokens, hidden=hidden, inter=inter, vocab=vocab, layers=layers)

    @property
    def launches(self) -> int:
        """Launches one ``run()`` makes: a layer's five, then the vocabulary's matmul and the cross entropy."""
        return 5 * len(self.norm_w) + 2

    def run(self) -> torch.Tensor:
        from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        h = self.x
        with torch.no_grad():
            for i in range(len(self.norm_w)):
                n = LigerRMSNormFunction.apply(h, self.norm_w[i], 1e-6)
                act = LigerSiLUMulFunction.apply(matmul(n, self.w_gate[i]), matmul(n, self.w_up[i]))
                h = matmul(act, self.w_down[i])
            logits = matmul(h, self.w_vocab)
            loss = LigerCrossEntropyFunction.apply(logits, self.target, None)
        return loss[0] if isinstance(loss, tuple) else loss


def warmed_launch_bound_step(warm_steps: int = 20) -> Step:
    """The launch-bound step on the GPU, run ``warm_steps`` times (kernels compiled, the matmul tuned) and the
    device drained, so that nothing timed afterwards compiles or tunes."""
    step = Step(*LAUNCH_BOUND)
    for _ in range(warm_steps):
        step.run()
    torch.cuda.synchronize()
    return step


_CPU: dict[str, list[float]] = {}  # the program thread's CPU seconds per timed loop, by variant


def _wall_and_cpu(fn: Callable[[], Any], steps: int, sync: Callable[[], Any]) -> tuple[float, float]:
    """Wall seconds (the device drained by ``sync`` before and after) and this thread's CPU seconds of
    ``steps`` calls of ``fn``."""
    sync()
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        fn()
    cpu = time.thread_time() - c0
    sync()
    return time.perf_counter() - t0, cpu


def _timed(fn: Any, steps: int, variant: str = "untraced") -> float:
    wall, cpu = _wall_and_cpu(fn, steps, torch.cuda.synchronize)
    _CPU.setdefault(variant, []).append(cpu)
    return wall


def gpu_busy_per_step(step: Step, n: int = 8) -> float:
    """The GPU's own seconds per step: ``n`` steps queued behind a spin kernel run back to back, so the
    CPU's pace (launch overhead) does not count. Compared with the untraced wall time per step it tells
    whether the untraced loop is bound by the GPU or by the program's CPU."""
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    torch.cuda._sleep(1_000_000_000)  # ~0.5 s of spinning: time to queue the steps behind it
    start.record()
    for _ in range(n):
        step.run()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / 1e3 / n


def d2h_bandwidth(nbytes: int = 1 << 30) -> float:
    """Bytes per second of one device-to-host copy into pinned memory (best of 5)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


# The verdict per step: the interleaved estimate's 95 % interval's upper end at most this, with the native


# accessor. The launch-bound step's program CPU paces it (recording's own CPU shows in full); at a model's widths
# the GPU does.
TARGET_LAUNCH_BOUND = 1.10
TARGET_MODEL_SIZED = 1.02


@contextlib.contextmanager
def native_setting(value: str) -> Any:
    """``TILELENS_NATIVE`` for the block (a recording reads it when it starts)."""
    import os

    before = os.environ.get("TILELENS_NATIVE")
    os.environ["TILELENS_NATIVE"] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TILELENS_NATIVE", None)
        else:
            os.environ["TILELENS_NATIVE"] = before


def run(
    steps: int = 40,
    samples: int = 3,
    tokens: int = 2048,
    hidden: int = 1024,
    inter: int = 2816,
    vocab: int = 32000,
    layers: int = 8,
    rounds: int | None = None,
    sustained_blocks: int = 12,
    references: bool = False,
    trace_launches: int = 6,
) -> dict[str, Any]:
    import tilelens
    from tilelens.core import native

    _CPU.clear()
    step = Step(tokens, hidden, inter, vocab, layers)
    step.run()  # compile and autotune untraced first: every variant below starts from warm caches
    torch.cuda.synchronize()
    launch_bound = (tokens, hidden, inter, vocab, layers) == LAUNCH_BOUND
    out: dict[str, Any] = {
        "shape": step.shape,
        "steps": steps,
        "launches_per_step": step.launches,
        "target": TARGET_LAUNCH_BOUND if launch_bound else TARGET_MODEL_SIZED,
    }
    base = [_timed(step.run, steps) for _ in range(samples)]
    out["untraced_s"] = min(base)
    out["wall_us_per_launch_untraced"] = min(base) / (steps * step.launches) * 1e6
    out["gpu_busy_per_step_s"] = gpu_busy_per_step(step)
    folder = Path(tempfile.mkdtemp(prefix="tilelens-compiled-bench-"))
    # The model-sized step takes ~10x longer a step: fewer rounds give the same interval width (less noise).
    rounds = rounds or (INTERLEAVED_ROUNDS if launch_bound else INTERLEAVED_ROUNDS // 4)
    native.build()  # before anything is timed: the accessor is there for the native variant
    out["native_why"] = native.describe()
    for variant, setting in (("native", "1"), ("python", "0")):
        (folder / variant).mkdir()
        with native_setting(setting):
            got = interleaved(step.run, step.launches, folder / variant, rounds=rounds)
        out[variant] = got
    if references:
        out.update(_references(step, steps, samples, base[-1], steps * step.launches))
    if sustained_blocks:
        out["sustained"] = sustained(Step(tokens, hidden, inter, vocab, 1), folder, blocks=sustained_blocks)

    # snapshots="all" over one step: the copies' cost against what the copy engine moves.
    per_step_base = min(base) / steps
    where = {"db": str(folder / "all.db"), "blobs": str(folder / "all-blobs")}
    with tilelens.Recording(backend="compiled", snapshots="all", **where) as rec:  # type: ignore[arg-type]
        step.run()  # warm: pins the pool
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step.run()
        torch.cuda.synchronize()
        t_step = time.perf_counter() - t0
        snap_bytes = rec.snapshot_policy.used_bytes // 2
    bandwidth = d2h_bandwidth()
    out["d2h_bandwidth_gbs"] = bandwidth / 1e9
    out["snapshots_all_s"] = t_step
    out["snapshot_bytes_estimate"] = snap_bytes
    out["ratio_all"] = t_step / per_step_base
    out["allowed_extra_s"] = snap_bytes / (0.7 * bandwidth)
    out["extra_s"] = t_step - per_step_base

    # Traces are derived in the CPU interpreter: timed on a small step (the big one would take hours).
    small = Step(tokens=32, hidden=64, inter=128, vocab=256, layers=1)
    where = {"db": str(folder / "small.db"), "blobs": str(folder / "small-blobs")}
    with tilelens.Recording(backend="compiled", snapshots="all", **where):  # type: ignore[arg-type]
        small.run()
    from tilelens.store import History

    with History.open(**where) as h:  # type: ignore[arg-type]
        ids = tilelens.select_launches(h)[:trace_launches]
        t0 = time.perf_counter()
        results = tilelens.derive_traces(h, ids)
        out["derived_trace_s_per_launch"] = (time.perf_counter() - t0) / max(1, len(ids))
        out["derived_outcomes"] = [r.outcome for r in results]
        out["derived_messages"] = [r.message[:160] for r in results if r.outcome != "match"]
    return out


def sustained(step: Step, folder: Path, *, blocks: int = 12, steps: int = 2) -> dict[str, Any]:
    """Sustained ``snapshots="all"``: inside one recording, ``blocks`` recorded blocks of ``steps`` steps, each
    between two untraced blocks (``Recording.paused()``), no flush in between, as a training loop records a
    few steps now and then. Each recorded block's wall time (the device drained) against the mean of the
    untraced blocks around it; the launches recorded without snapshots because the writer's backlog was full;
    and the writer's sustained rate: the snapshot bytes it stored over the time from the first block to the
    end of its drain."""
    import tilelens

    where = {"db": str(folder / "sustained.db"), "blobs": str(folder / "sustained-blobs")}
    sync = torch.cuda.synchronize
    ratios: list[float] = []
    with tilelens.Recording(backend="compiled", snapshots="all", **where) as rec:  # type: ignore[arg-type]
        step.run()  # warm (pins the first chunk of the pool); not timed
        rec.flush()
        t_start = time.perf_counter()

        def paused() -> float:
            with rec.paused():
                return _wall_and_cpu(step.run, steps, sync)[0]

        before = paused()
        for _ in range(blocks):
            recorded = _wall_and_cpu(step.run, steps, sync)[0]
            after = paused()
            ratios.append(recorded / ((before + after) / 2))
            before = after
        rec.flush()
        drained = time.perf_counter() - t_start
        dropped = rec.snapshots_dropped
        pool = rec._compiled.pool if rec._compiled is not None else None
        stored = 0 if pool is None else pool.released_bytes  # host copies the writer stored (and let go)
    ordered = sorted(ratios)

    def quantile(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "blocks": blocks,
        "steps_per_block": steps,
        "launches_per_block": steps * step.launches,
        "ratios": ratios,
        "p50": quantile(0.5),
        "p99": quantile(0.99),
        "worst": ordered[-1],
        "dropped_launches": dropped,
        "recorded_launches": blocks * steps * step.launches + step.launches,
        "snapshot_bytes": stored,
        "writer_mb_s": stored / 1e6 / drained,
        "pinned_bytes": None if pool is None else pool.pinned_bytes,
        "backlog_limit": None if pool is None else pool.limit,
    }


# Rounds of the interleaved estimate. The verdict is its 95 % interval's upper end, so the interval's width
# counts against the target as much as the estimate does: at 120 rounds its half-width on the lent H200 was
# 0.02-0.03, at 480 (four times the samples) 0.004-0.012, for ~20-40 s more of the bench's time.
INTERLEAVED_ROUNDS = 480


def interleaved(
    run: Callable[[], Any],
    launches_per_step: int,
    folder: Path,
    *,
    sync: Callable[[], Any] = torch.cuda.synchronize,
    recording: dict[str, Any] | None = None,
    untraced: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    rounds: int = INTERLEAVED_ROUNDS,
    steps: int = 4,
    lead: int = 4,
    seed: int = 0,
) -> dict[str, Any]:
    """The launch-bound ratio measured finely: many short samples inside one ``snapshots="none"`` recording.

    The samples of :func:`run` each enter a recording of their own and last ~0.1 s; on the lent H200 the
    host's pace moves such a sample against the next by up to -45 %/+75 % (a busy neighbour, the
    hypervisor), and the median of seven pairs moved by ±5 % between runs. Here the pairs are many and close
    together: ``rounds`` rounds, each a timed sample of ``steps`` steps (``run()`` each) followed by an
    untraced one, alternately a recorded round (``lead`` untimed recorded steps first, so that the writer
    process is at work when the timing starts, as in a long recording) and a control round (the same,
    untraced: inside ``Recording.paused()``, TileLens's interception removed, and ``untraced()``). Before every
    untraced sample the writer is flushed (untimed), so that its work on the recorded launches never lands in
    an untraced sample. Each timed sample is divided by the mean of the untraced samples on either side of it.

    The control rounds measure the same with nothing recorded: their median is the estimator's own bias (a
    sample after a recorded one is not quite like a sample after an untraced one), and the figure reported is
    the recorded rounds' median divided by the control rounds' median, with a 95 % interval from resampling
    both (``seed``: the same interval for the same samples). ``recording``: more of ``Recording``'s keyword
    arguments (beside the history's place, the backend and the snapshots); ``sync``: waits for the device
    (a CPU stand-in passes a no-op).
    """
    import tilelens

    where = {"db": str(folder / "interleaved.db"), "blobs": str(folder / "interleaved-blobs")}
    base: list[tuple[float, float]] = []
    timed: dict[str, list[tuple[float, float, int]]] = {"recorded": [], "control": []}
    options = {"backend": "compiled", "snapshots": "none", **(recording or {})}

    def sample(n: int) -> tuple[float, float]:
        return _wall_and_cpu(run, n, sync)

    with tilelens.Recording(**where, **options) as rec:
        for _ in range(lead):
            run()  # templates made before anything is timed
        native_capture = rec._compiled is not None and rec._compiled.native_capture

        def paused(n: int) -> tuple[float, float]:
            with rec.paused(), untraced():
                return sample(n)

        rec.flush()
        base.append(paused(steps))
        for i in range(rounds):
            kind = "recorded" if i % 2 == 0 else "control"
            if kind == "recorded":
                sample(lead)
                wall, cpu = sample(steps)
            else:
                paused(lead)
                wall, cpu = paused(steps)
            timed[kind].append((wall, cpu, len(base) - 1))
            rec.flush()
            base.append(paused(steps))

    def ratios(kind: str) -> list[float]:
        return [wall / ((base[j][0] + base[j + 1][0]) / 2) for wall, _cpu, j in timed[kind]]

    rng = random.Random(seed)
    rec_r, ctl_r = ratios("recorded"), ratios("control")
    resampled = sorted(
        _median(rng.choices(rec_r, k=len(rec_r))) / _median(rng.choices(ctl_r, k=len(ctl_r)))
        for _ in range(2000)
    )
    launches = launches_per_step * steps
    added = [
        (cpu - (base[j][1] + base[j + 1][1]) / 2) / launches * 1e6 for _wall, cpu, j in timed["recorded"]
    ]
    return {
        "interleaved_rounds": rounds,
        "interleaved_steps": steps,
        "interleaved_recorded_launches": len(rec.launch_ids),
        "interleaved_recorded_median": _median(rec_r),
        "interleaved_control_median": _median(ctl_r),
        "interleaved_ratio": _median(rec_r) / _median(ctl_r),
        "interleaved_ratio_low": resampled[int(0.025 * len(resampled))],
        "interleaved_ratio_high": resampled[int(0.975 * len(resampled)) - 1],
        "interleaved_cpu_extra_us_per_launch": _median(added),
        "native_capture": native_capture,
    }


def _references(step: Step, steps: int, samples: int, before: float, launches: int) -> dict[str, Any]:
    """The reference interpositions (``benchmarks.reference_wrappers``), each sample between two untraced
    ones as the recorded samples are (``before``: the untraced sample just taken): what being in the call
    path costs before any recording, and what the least Python capture costs, beside TileLens's ratio."""
    from benchmarks.reference_wrappers import KINDS, installed

    out: dict[str, Any] = {}
    kinds = list(KINDS)
    ratios: dict[str, list[float]] = {kind: [] for kind in kinds}
    extra_cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    before_cpu = _CPU["untraced"][-1]
    for _ in range(samples):
        for kind in kinds:
            with installed(kind):
                t = _timed(step.run, steps, kind)
            after = _timed(step.run, steps)
            ratios[kind].append(t / ((before + after) / 2))
            after_cpu = _CPU["untraced"][-1]
            extra_cpu[kind].append((_CPU[kind][-1] - (before_cpu + after_cpu) / 2) / launches * 1e6)
            before, before_cpu = after, after_cpu
    for kind, values in ratios.items():
        out[f"reference_{kind}_paired"] = sorted(values)
        out[f"reference_{kind}_paired_median"] = _median(values)
        out[f"cpu_extra_us_per_launch_{kind}"] = _median(extra_cpu[kind])
    return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _verdict(r: dict[str, Any]) -> str:
    n, p = r["native"], r["python"]
    met = "met" if n["interleaved_ratio_high"] <= r["target"] else "NOT met"
    return (
        f"  snapshots=none <= {r['target']:.2f}x with the native accessor: {met} (interleaved estimate"
        f" {n['interleaved_ratio']:.3f}, 95 % {n['interleaved_ratio_low']:.3f}-{n['interleaved_ratio_high']:.3f},"
        f" program thread CPU {n['interleaved_cpu_extra_us_per_launch']:+.1f} us a launch); Python capture"
        f" {p['interleaved_ratio']:.3f} ({p['interleaved_ratio_low']:.3f}-{p['interleaved_ratio_high']:.3f},"
        f" {p['interleaved_cpu_extra_us_per_launch']:+.1f} us a launch); {r['native']['interleaved_rounds']}"
        f" rounds each; captured natively: {n['native_capture']} and {p['native_capture']}"
    )


def report(r: dict[str, Any]) -> str:
    lines = [
        f"compiled recording, step {r['shape']}, {r['launches_per_step']} launches a step",
        f"  untraced compiled        {r['untraced_s']:.3f} s per {r['steps']} steps"
        f" ({r['wall_us_per_launch_untraced']:.1f} us a launch; GPU busy ~{r['gpu_busy_per_step_s'] * 1e3:.2f} ms"
        f" a step)",
        _verdict(r),
        f"  native: {r['native_why']}",
    ]
    if "reference_wrapper_paired" in r:
        lines.append(
            "  references, paired (benchmarks.reference_wrappers): a do-nothing Python wrapper"
            f" {r['reference_wrapper_paired_median']:.3f}, the least Python capture"
            f" {r['reference_capture_paired_median']:.3f}"
        )
    s = r.get("sustained")
    if s:
        lines.append(
            f"  sustained snapshots=all, {s['blocks']} blocks of {s['steps_per_block']} steps"
            f" ({s['launches_per_block']} launches) against the untraced blocks around each: p50 {s['p50']:.2f}x,"
            f" p99 {s['p99']:.2f}x, worst {s['worst']:.2f}x; {s['dropped_launches']} of {s['recorded_launches']}"
            f" launches without snapshots (backlog full); writer {s['writer_mb_s']:.0f} MB/s sustained"
            f" ({s['snapshot_bytes'] / 1e9:.2f} GB); pinned {(s['pinned_bytes'] or 0) / 1e9:.2f} GB of"
            f" {(s['backlog_limit'] or 0) / 1e9:.2f} GB allowed"
        )
    extra_met = "met" if r["extra_s"] <= r["allowed_extra_s"] else "NOT met"
    lines += [
        f"  snapshots=all, one step {r['snapshots_all_s']:.3f} s, ratio {r['ratio_all']:.2f}; D2H (pinned)"
        f" {r['d2h_bandwidth_gbs']:.1f} GB/s; snapshot bytes ~{r['snapshot_bytes_estimate'] / 1e9:.2f} GB, extra"
        f" {r['extra_s']:.3f} s vs allowed {r['allowed_extra_s']:.3f} s at 70 % of D2H: {extra_met}",
        f"  derived trace            {r['derived_trace_s_per_launch']:.2f} s per launch; outcomes {r['derived_outcomes']}",
    ]
    lines += [f"    {m}" for m in r.get("derived_messages", [])]
    return "\n".join(lines)
