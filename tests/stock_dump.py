"""Run one case of tests/batched_cases.py in Triton's stock interpreter, without TileLens, and dump its results.

    TRITON_INTERPRET=1 python -m tests.stock_dump CASE OUTDIR

After every launch, the bytes of each tensor argument's element span (what TileLens snapshots as ``after``)
go to ``OUTDIR/<launch>_<position>.bin``. This process never imports TileLens: the comparison is against the
interpreter as Triton ships it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
from triton.runtime import interpreter  # noqa: E402


def _span_bytes(t: torch.Tensor) -> bytes:
    if t.numel() == 0:
        return b""
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    flat = t.detach().as_strided((extent,), (1,))
    return bytes(flat.contiguous().view(torch.uint8).numpy().tobytes())


def main() -> int:
    name, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    original = interpreter.GridExecutor.__call__
    count = [0]

    def dumping(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        n = count[0]
        count[0] += 1
        names = list(self.arg_names)
        bound = dict(zip(names, args))
        bound.update(kwargs)
        for position, arg_name in enumerate(names):
            value = bound.get(arg_name)
            if isinstance(value, torch.Tensor):
                (out / f"{n}_{position}.bin").write_bytes(_span_bytes(value))

    interpreter.GridExecutor.__call__ = dumping  # this throwaway process's own interpreter
    from tests.batched_cases import run_case

    run_case(name, lambda fn: fn())
    (out / "launches").write_text(str(count[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
