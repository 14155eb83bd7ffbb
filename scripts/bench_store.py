"""Write cost of one launch: its rows plus one 1 MiB tensor blob, on this machine's disk.

Usage: python scripts/bench_store.py [--n 50] [--dir DIR]

"fresh" writes new tensor content every launch (hash, Parquet encode, temp file, fsync, rename, rows);
"repeated" writes the same tensor every time, so the blob is found by name and only the rows are written.
"on disk" writes tensors whose blobs another process stored before: found by name, compared with the file once
(the check that a blob referenced is intact), rows written.
Each sample is one ``History.write_launch`` call; the median and the 90th percentile are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import store_helpers  # noqa: E402
from tilelens.store import BlobStore, History  # noqa: E402

ELEMENTS = 256 * 1024  # float32: 1 MiB


def measure(history: History, run: int, n: int, fresh: bool) -> list[float]:
    gen = torch.Generator().manual_seed(1 if fresh else 2)
    fixed = torch.randn(ELEMENTS, generator=gen)
    times = []
    for i in range(n):
        x = torch.randn(ELEMENTS, generator=gen) if fresh else fixed
        # Small companions stay identical so the 1 MiB tensor is the only new blob.
        rec = store_helpers.launch(x, torch.zeros(16), None, seq=i)
        t0 = time.perf_counter()
        history.write_launch(run, rec)
        times.append(time.perf_counter() - t0)
    return times


def measure_on_disk(history: History, run: int, n: int) -> list[float]:
    """Each tensor's blob is stored first through another BlobStore (another process, in effect)."""
    gen = torch.Generator().manual_seed(3)
    other = BlobStore(history.blobs.root)
    times = []
    for i in range(n):
        x = torch.randn(ELEMENTS, generator=gen)
        other.put_tensor(x)
        rec = store_helpers.launch(x, torch.zeros(16), None, seq=i)
        t0 = time.perf_counter()
        history.write_launch(run, rec)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to create the history (default: a temp dir)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, History.open(str(Path(tmp) / "bench.db")) as h:
        run = h.begin_run(store_helpers.run_info(tag="bench"))
        measure(h, run, 3, fresh=True)  # warm up: imports, connection, first blob folders
        cases = (
            ("fresh", lambda: measure(h, run, args.n, True)),
            ("repeated", lambda: measure(h, run, args.n, False)),
            ("on disk", lambda: measure_on_disk(h, run, args.n)),
        )
        for label, case in cases:
            ts = sorted(case())
            p90 = ts[min(len(ts) - 1, int(0.9 * len(ts)))]
            print(
                f"{label:9s} 1 MiB tensor + rows: median {statistics.median(ts) * 1e3:7.2f} ms"
                f"   p90 {p90 * 1e3:7.2f} ms   (n={len(ts)})"
            )
        print(f"history: {h.counts()['launches']} launches, {h.counts()['blobs']} blobs in {tmp}")


if __name__ == "__main__":
    main()
