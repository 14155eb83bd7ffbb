"""The dangerous out-of-bounds programs, run in a process of their own by tests/end_to_end/test_oob.py.

``python -m tests.oob_programs RESULT.json DB BLOBS`` records every scenario into the history ``DB``, replays each
recorded launch on the CPU, and writes what it saw to ``RESULT.json``. The stock interpreter crashes or
corrupts its heap on most of these kernels, so a regression in TileLens's bounds guard kills this process,
not the test worker: the test then fails with this process's exit status and stderr.

Every tensor a kernel writes is a slice of a larger numpy "arena" filled with a canary, made a tensor with
``torch.from_numpy``: its storage is exactly the slice, so the arena around it is memory no argument owns,
and each scenario reports whether any of its bytes changed. Nothing here decides what is right: the test
compares these facts with counts worked out by hand.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import torch

import tilelens
from tests import oob_kernels as k
from tilelens.core import compat

CANARY = -7.0


class Arena:
    """``n`` elements of ``dtype`` with ``pad`` canary elements on both sides; ``tensor`` owns only the middle."""

    def __init__(self, n: int, pad: int, dtype: Any = np.float32, fill: Any = 0) -> None:
        self.array = np.full(pad + n + pad, CANARY, dtype=dtype)
        self.pad, self.n = pad, n
        self.array[pad : pad + n] = fill
        self.tensor = torch.from_numpy(self.array[pad : pad + n])
        self._canary = self.array.copy()

    def canaries_intact(self) -> bool:
        before, after = self.array[: self.pad], self.array[self.pad + self.n :]
        return bool(
            np.array_equal(before.view(np.uint8), self._canary[: self.pad].view(np.uint8))
            and np.array_equal(after.view(np.uint8), self._canary[self.pad + self.n :].view(np.uint8))
        )


def bits_equal(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> bool:
    a = a.numpy() if isinstance(a, torch.Tensor) else a
    b = b.numpy() if isinstance(b, torch.Tensor) else b
    return a.shape == b.shape and bool(np.array_equal(a.view(np.uint8), b.view(np.uint8)))


def launched(rec: Any, before: int) -> list[int]:
    return list(rec.launch_ids[before:])


def main(out_path: str, db: str, blobs: str) -> None:
    torch.manual_seed(0)
    results: dict[str, Any] = {}
    with tilelens.record(db, blobs) as rec:
        # 1. An unmasked tail store: 1024 lanes into 1000 elements, three launches.
        x = torch.arange(1024, dtype=torch.float32) - 500.0
        y = Arena(1000, 4096)
        ref = Arena(1000, 16)
        n0 = len(rec.launch_ids)
        for _ in range(3):
            k.tail_store[(1,)](x, y.tensor, BLOCK=1024)
        buggy = launched(rec, n0)
        k.tail_store_masked[(1,)](x, ref.tensor, 1000, BLOCK=1024)
        results["tail_store"] = {
            "launches": buggy,
            "canaries": y.canaries_intact(),
            "same_as_correct": bits_equal(y.tensor, ref.tensor),
        }

        # 2. A transposed write whose mask checks the wrong axis: x is 40 x 24, y is 24 x 40.
        M, N = 40, 24
        x = torch.randn(M, N)
        y = Arena(N * M, 2048)
        good = Arena(N * M, 16)
        n0 = len(rec.launch_ids)
        k.transpose[(2, 1)](x, y.tensor, M, N, BM=32, BN=32, WRONG_AXIS=True)
        buggy = launched(rec, n0)
        k.transpose[(2, 1)](x, good.tensor, M, N, BM=32, BN=32, WRONG_AXIS=False)
        hand = np.zeros(N * M, dtype=np.float32)  # lanes i < 24, j < 24 land in y; j >= 24 fall past its end
        xs = x.numpy()
        for i in range(24):
            for j in range(24):
                hand[j * M + i] = xs[i, j]
        results["transpose"] = {
            "launches": buggy,
            "canaries": y.canaries_intact(),
            "same_as_hand": bits_equal(y.tensor, hand),
            "written_lanes_same_as_correct": bits_equal(
                y.tensor.view(N, M)[:, :24].contiguous(), good.tensor.view(N, M)[:, :24].contiguous()
            ),
        }

        # 3. A scatter and a gather with indices up to 10 million elements away, both signs.
        n = 256
        idx = torch.from_numpy(np.random.default_rng(1).permutation(1000)[:n].astype(np.int32))
        strays = {5: 10_000_000, 17: -10_000_000, 130: 9_999_999, 250: -9_999_999, 200: 1000, 201: -1}
        for lane, value in strays.items():
            idx[lane] = value
        x = torch.randn(n)
        y = Arena(1000, 1024)
        n0 = len(rec.launch_ids)
        k.scatter[(2,)](x, idx, y.tensor, n, BLOCK=128)
        scatter_ids = launched(rec, n0)
        hand = np.zeros(1000, dtype=np.float32)
        inside = [i for i in range(n) if i not in strays]
        hand[idx.numpy()[inside]] = x.numpy()[inside]
        src = Arena(1000, 1024, fill=np.arange(1000, dtype=np.float32))
        out = Arena(n, 16)
        n0 = len(rec.launch_ids)
        k.gather[(2,)](src.tensor, idx, out.tensor, n, BLOCK=128)
        gather_ids = launched(rec, n0)
        results["scatter"] = {
            "launches": scatter_ids,
            "canaries": y.canaries_intact(),
            "same_as_hand": bits_equal(y.tensor, hand),
        }
        results["gather"] = {
            "launches": gather_ids,
            "canaries": src.canaries_intact() and out.canaries_intact(),
            "values": {str(lane): float(out.tensor[lane]) for lane in strays},
            "in_bounds_same": bits_equal(out.tensor[inside], src.tensor[idx[inside].long()]),
        }

        # 4. atomic_add with 12 lanes past the end of 16 counters and one 5 million elements before them.
        idx = torch.from_numpy((np.arange(64) % 20).astype(np.int32))
        idx[63] = -5_000_000
        counts = Arena(16, 256)
        old = Arena(64, 16)
        n0 = len(rec.launch_ids)
        k.histogram[(1,)](idx, counts.tensor, old.tensor, 64, BLOCK=64)
        results["atomic_add"] = {
            "launches": launched(rec, n0),
            "canaries": counts.canaries_intact() and old.canaries_intact(),
            "counts": counts.tensor.tolist(),
            "old": old.tensor.tolist(),
        }

        # 5. atomic_cas over 64 lanes of 40 flags (the interpreter's atomic_cas has no mask at all).
        flags = Arena(40, 256, dtype=np.int32)
        old = Arena(64, 16, dtype=np.int32)
        n0 = len(rec.launch_ids)
        k.claim[(1,)](flags.tensor, old.tensor, BLOCK=64)
        results["atomic_cas"] = {
            "launches": launched(rec, n0),
            "canaries": flags.canaries_intact() and old.canaries_intact(),
            "flags": flags.tensor.tolist(),
            "old": old.tensor.tolist(),
        }

        # 6. A block-pointer store without boundary_check, rows 40..63 of a 40 x 32 output (Triton < 3.9).
        M, N = 40, 32
        x = torch.randn(M, N)
        if compat.HAS_BLOCK_POINTERS:
            y = Arena(M * N, 2048)
            n0 = len(rec.launch_ids)
            k.block_ptr_store[(2,)](x, y.tensor, M, N, BM=32, BN=32)
            results["block_ptr"] = {
                "launches": launched(rec, n0),
                "canaries": y.canaries_intact(),
                "same_as_correct": bits_equal(y.tensor, (x + 1.0).reshape(-1)),
            }

        # 7. A tensor-descriptor store through a descriptor claiming 48 rows of a 40-row output.
        y = Arena(M * N, 2048)
        n0 = len(rec.launch_ids)
        k.descriptor_store[(2,)](x, y.tensor, M, 48, N, BM=32, BN=32)
        results["descriptor"] = {
            "launches": launched(rec, n0),
            "canaries": y.canaries_intact(),
            "same_as_correct": bits_equal(y.tensor, (x + 1.0).reshape(-1)),
        }

        # 8. A tail store into a view that lands in its parent tensor: written, as compiled code would.
        parent = Arena(2000, 1024, fill=np.arange(2000, dtype=np.float32))
        view = parent.tensor[500:1000]
        x = torch.randn(512)
        n0 = len(rec.launch_ids)
        k.tail_store[(1,)](x, view, BLOCK=512)
        p = parent.tensor.numpy()
        results["view_into_parent"] = {
            "launches": launched(rec, n0),
            "canaries": parent.canaries_intact(),
            "view_same_as_correct": bits_equal(view, x[:500] * 2.0),
            "parent_tail_written": bits_equal(p[1000:1012], (x[500:512] * 2.0).numpy()),
            "parent_rest_untouched": bits_equal(p[:500], np.arange(500, dtype=np.float32))
            and bits_equal(p[1012:], np.arange(1012, 2000, dtype=np.float32)),
        }

    with tilelens.open_history(db, blobs) as h:
        for case in results.values():
            replays = [tilelens.replay_launch(h, i) for i in case["launches"]]
            case["replays"] = [[r.outcome, r.trace_equal, r.message] for r in replays]
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
