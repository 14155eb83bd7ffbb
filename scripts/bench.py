#!/usr/bin/env python3
"""TileLens benchmark suite: recording overhead, trace size, replay, history scale, concurrency.

    python scripts/bench.py --quick                 # < 3 minutes on a 2-core machine
    python scripts/bench.py --json bench.json       # the full suite, every figure to a file
    python scripts/bench.py --compare main          # main vs the working tree, interleaved (seed table)
    python scripts/bench.py --compiled              # on a CUDA machine: recording with backend="compiled"
    python scripts/bench.py --touched               # 64 elements of a 256 MiB tensor; a tiny launch's cost

Targets it reports against: over the ten seed workloads (every shape run), recorded / stock interpreter median
<= 0.2 and none above 1.0, CPU replay / stock interpreter likewise; access traces <= 0.5 bytes per lane;
`ls` / `show` / indexed `sql` under 0.3 s at 1,000,000 launches;
--touched: recording a 64-element launch on a 256 MiB tensor within 3x of the plain program, < 4 MiB of blobs,
peak RSS < 1.2x the program's own;
--compiled: recording with snapshots="none" <= 1.10x the untraced compiled step at the launch-bound step and
<= 1.02x at a model's widths (the interleaved estimate's 95 % upper end, with the native accessor; the Python
capture's figure printed beside it); sustained snapshots="all" blocks' p50/p99 and the writer's MB/s printed;
snapshots="all" over one step costing at most the snapshot bytes at 70 % of the measured device-to-host
bandwidth.
"""

from __future__ import annotations

import os
import sys

# The stock interpreter runs nested @jit helpers only when Triton was imported in interpreter mode; the
# compiled-recording section (--compiled, on a GPU) needs Triton in compiled mode.
if "--compiled" not in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TARGET_MEDIAN, TARGET_MAX, TARGET_BPL, TARGET_CLI_S = 0.2, 1.0, 0.5, 0.3
# The recorder issue's two extra shapes, not seed workloads: outside the median/max above.
EXTRA = (("softmax", "64x1000"),)


def _fmt_ms(s: float | None) -> str:
    return "n/a" if s is None else f"{s * 1e3:.1f} ms"


def workload_table(results: list) -> str:
    lines = [
        "| workload | shape | stock (min) | recorded (min) | ratio | lanes | trace bytes | B/lane | CPU replay "
        "| replay/stock | engine | source |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        flag = " ⚠️" if r.ratio > TARGET_MAX else ""
        rr = "n/a" if r.replay_s is None else f"{r.replay_s / r.stock_s:.3f}"
        rflag = " ⚠️" if r.replay_s is not None and r.replay_s / r.stock_s > TARGET_MAX else ""
        lines.append(
            f"| {r.workload} | {r.shape} | {_fmt_ms(r.stock_s)} | {_fmt_ms(r.recorded_s)} | {r.ratio:.3f}{flag} | "
            f"{r.lanes:,} | {r.trace_bytes:,} | {r.bytes_per_lane:.4f} | {_fmt_ms(r.replay_s)} | {rr}{rflag} | "
            f"{r.engine} | {r.source} |"
        )
    seed = [r for r in results if (r.workload, r.shape) not in EXTRA]
    ratios = [r.ratio for r in seed]
    replays = [r.replay_s / r.stock_s for r in seed if r.replay_s is not None]
    bpl = [r.bytes_per_lane for r in results]
    lines.append("")
    lines.append(
        f"seed workloads ({len(seed)} runs): recorded/stock median {statistics.median(ratios):.3f} "
        f"(target <= {TARGET_MEDIAN}), max {max(ratios):.3f} (target <= {TARGET_MAX})"
        + (
            f"; CPU replay/stock median {statistics.median(replays):.3f}, max {max(replays):.3f} (same targets)"
            if replays
            else ""
        )
        + f"; max bytes/lane {max(bpl):.4f} (target <= {TARGET_BPL})"
    )
    fallbacks = [
        f"{r.workload}[{r.shape}]: {r.engine}" for r in results if r.engine and r.engine != "batched"
    ]
    lines.append("fell back to one program at a time: " + ("; ".join(fallbacks) if fallbacks else "none"))
    return "\n".join(lines)


def machine() -> dict[str, str]:
    import numpy
    import torch
    import triton

    return {
        "python": platform.python_version(),
        "triton": triton.__version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "cpus": str(os.cpu_count()),
        "machine": platform.machine(),
        "system": platform.platform(),
    }


# --compiled's default steps (tokens, hidden, intermediate, vocab, layers): a launch-bound one, where the
# program's CPU per launch (Python around each launch) paces the loop and recording's own CPU shows in full,
# and one at Llama-3.2-1B's widths and vocabulary with 4,096 tokens, where the GPU paces it.
COMPILED_SHAPES = ("2048,1024,2816,32000,8", "4096,2048,8192,128256,8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--quick", action="store_true", help="one shape per workload, fewer samples, small histories"
    )
    p.add_argument("--samples", type=int, default=None, help="samples per measurement (default 5, quick 3)")
    p.add_argument("--burst", type=int, default=2, help="launches per recorded sample (default 2)")
    p.add_argument("--only", default="", help="comma-separated workload names")
    p.add_argument("--json", type=Path, help="write every figure to this file")
    p.add_argument("--compare", metavar="REF", help="compare the working tree with a git ref (seed table)")
    p.add_argument("--skip-history", action="store_true", help="skip the synthetic-history part")
    p.add_argument("--skip-concurrency", action="store_true", help="skip the 4-process part")
    p.add_argument("--skip-workloads", action="store_true", help="skip the recording/replay workloads")
    p.add_argument(
        "--postgres",
        action="store_true",
        help="history scale on PostgreSQL too (a throwaway server: Debian's postgresql, as CI installs it)",
    )
    p.add_argument(
        "--many-recorders",
        action="store_true",
        help="8 processes x 200 launches into one SQLite and one PostgreSQL history, readers meanwhile",
    )
    p.add_argument(
        "--children",
        action="store_true",
        help="Only the child-process benchmark: a 4-worker pool recording 400 launches vs one process.",
    )
    p.add_argument(
        "--compiled",
        action="store_true",
        help="Only the compiled-recording benchmark (needs CUDA): a multi-kernel bf16 step untraced vs "
        "recorded with snapshots none/all, D2H bandwidth, derived-trace time per launch.",
    )
    p.add_argument("--steps", type=int, default=40, help="--compiled: steps per measurement (default 40)")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="--compiled: rounds of the interleaved estimate (default 480 at the launch-bound step, 120 else)",
    )
    p.add_argument(
        "--sustained-blocks",
        type=int,
        default=12,
        help="--compiled: recorded blocks of sustained snapshots=all, at the first shape (default 12; 0: none)",
    )
    p.add_argument("--references", action="store_true", help="--compiled: also the reference interpositions")
    p.add_argument(
        "--shape",
        action="append",
        help="--compiled: tokens,hidden,intermediate,vocab,layers, repeatable (default: both of "
        + " and ".join(COMPILED_SHAPES)
        + ": a launch-bound step and one at a 1B-parameter model's widths)",
    )
    p.add_argument(
        "--touched",
        action="store_true",
        help="Only the touched-snapshot benchmark: one launch touching 64 elements of a 256 MiB tensor, plain "
        "vs recorded (time, blob bytes, peak RSS, each in its own process), and a tiny launch's fixed cost.",
    )
    p.add_argument("--launches", type=int, default=200, help="--touched: tiny launches timed (default 200)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    samples = args.samples or (3 if args.quick else 5)

    if args.compiled:
        from benchmarks.compiled_step import report as compiled_report
        from benchmarks.compiled_step import run as run_compiled

        print("## Recording compiled on a GPU\n")
        results = []
        for i, shape in enumerate(args.shape or COMPILED_SHAPES):
            tokens, hidden, inter, vocab, layers = (int(v) for v in shape.split(","))
            result = run_compiled(
                steps=args.steps,
                samples=samples,
                tokens=tokens,
                hidden=hidden,
                inter=inter,
                vocab=vocab,
                layers=layers,
                rounds=args.rounds,
                sustained_blocks=args.sustained_blocks if i == 0 else 0,
                references=args.references,
            )
            results.append(result)
            print(compiled_report(result), end="\n\n", flush=True)
        print(f"machine: {machine()}")
        if args.json:
            args.json.write_text(json.dumps({"machine": machine(), "compiled": results}, indent=2))
        return 0

    if args.touched:
        from benchmarks.touched import kv_cache, tiny_launches
        from benchmarks.touched import report as touched_report

        kv, tiny = kv_cache(256), tiny_launches(args.launches)
        print("## Snapshots of what a launch touches, and a tiny launch's fixed cost (issue 18)\n")
        print(touched_report(kv, tiny))
        print(f"\nmachine: {machine()}")
        if args.json:
            args.json.write_text(json.dumps({"machine": machine(), "touched": kv, "tiny": tiny}, indent=2))
        return 0

    if args.children:
        from benchmarks.children import run_children, table

        with tempfile.TemporaryDirectory(prefix="tilelens-bench-") as tmp:
            result = run_children(Path(tmp))
        print("## Child processes: a worker pool recording into one history\n")
        print(table(result))
        print(f"\nmachine: {machine()}")
        if args.json:
            args.json.write_text(json.dumps({"machine": machine(), "children": result}, indent=2))
        return 0

    if args.compare:
        from benchmarks.compare import compare

        return compare(args.compare, quick=args.quick, samples=samples, only=args.only)

    from benchmarks.runner import run_suite
    from benchmarks.workloads import all_cases

    cases = [] if args.skip_workloads else all_cases(args.quick)
    if args.only:
        wanted = set(args.only.split(","))
        cases = [c for c in cases if c.workload in wanted]
    report: dict = {"machine": machine(), "samples": samples, "burst": args.burst}
    with contextlib.ExitStack() as stack:
        server = None
        if args.postgres or args.many_recorders:
            from benchmarks.pgserver import throwaway_postgres

            server = stack.enter_context(throwaway_postgres())
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="tilelens-bench-"))
        results = run_suite(
            cases,
            Path(tmp),
            samples,
            args.burst,
            progress=None
            if args.worker
            else (lambda c: print(f"  {c.name} ...", file=sys.stderr, flush=True)),
        )
        report["workloads"] = [r.as_dict() for r in results]
        if args.worker:
            json.dump(report, sys.stdout)
            return 0
        if results:
            print("## Recording overhead, trace size, replay\n")
            print(workload_table(results))
        for r in results:
            for note in r.notes:
                print(f"- {r.workload}[{r.shape}]: {note}")
        if not args.skip_concurrency and not args.many_recorders:
            from benchmarks.concurrency import concurrency_line, run_concurrency

            conc = run_concurrency(Path(tmp) / "concurrent", processes=4, launches=10 if args.quick else 40)
            report["concurrency"] = conc
            print("\n## Concurrency: 4 processes, one SQLite history\n")
            print(concurrency_line(conc))
        if args.many_recorders:
            from benchmarks.concurrency import concurrency_line, run_concurrency

            print("\n## Many recorders: 8 processes x 200 launches, readers meanwhile\n")
            many = {}
            for backend in ("sqlite", "postgresql"):
                db = None if backend == "sqlite" else server.url(server.create_database("many"))  # type: ignore[union-attr]
                many[backend] = run_concurrency(
                    Path(tmp) / f"many-{backend}", processes=8, launches=200, db=db
                )
                print(f"- {concurrency_line(many[backend])}", flush=True)
            report["many_recorders"] = many
        if not args.skip_history:
            from benchmarks.history_scale import run_history_scale

            sizes = [100_000] if args.quick else [100_000, 1_000_000]
            new_db = (lambda: server.url(server.create_database("scale"))) if args.postgres else None  # type: ignore[union-attr]
            scale = run_history_scale(Path(tmp) / "scale", sizes, new_postgres_db=new_db)
            report["history_scale"] = scale
            print("\n## History scale (whole commands, process start included)\n")
            print(scale["table"])
    print(f"\nmachine: {report['machine']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
