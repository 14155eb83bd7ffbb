"""Launches from several threads are serialized: every one recorded once, every output right.

This module sets TRITON_INTERPRET=1 at import, as user code run under the stock interpreter does; so its
kernel is an InterpretedFunction, and other tests collected into the same worker must still see compiled-mode
JITFunctions (tests/kernels.py decorates inside knobs.runtime.scope()).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import threading  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

import tilelens  # noqa: E402
from tests import kernels  # noqa: E402
from tilelens.core import compat  # noqa: E402
from tilelens.core.trace import TritonTrace  # noqa: E402
from tilelens.store import History  # noqa: E402
from tilelens.store.sql.models import Launch  # noqa: E402


@triton.jit
def axpy(x_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=m), mask=m)


def _run_threads(target, count):
    errors = []

    def guarded(i):
        try:
            target(i)
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_interpreter_mode_kernel_is_an_interpreted_function():
    assert isinstance(axpy, compat.InterpretedFunction)
    assert isinstance(kernels.add_kernel, compat.JITFunction)


def test_threads_recording_into_one_history(tmp_path):
    where = {"db": str(tmp_path / "h.db"), "blobs": str(tmp_path / "blobs")}
    per_thread = 5
    outputs = {}

    def work(i):
        x = torch.randn(300)
        for j in range(per_thread):
            out = torch.empty(300)
            axpy[(3,)](x, out, float(i + j), 300, BLOCK=128)
            outputs[(i, j)] = (x, out)
            y = torch.empty(300)
            kernels.add_kernel[(3,)](x, x, y, 300, BLOCK=128)
            assert torch.equal(y, x + x)

    with tilelens.record(**where) as rec:
        _run_threads(work, 4)
    for (i, j), (x, out) in outputs.items():
        assert torch.equal(out, float(i + j) * x)
    assert len(rec.launch_ids) == 4 * per_thread * 2
    with History.open(**where) as h, h.session() as s:
        seqs = s.scalars(select(Launch.seq).order_by(Launch.seq)).all()
        assert seqs == list(range(40))
        assert s.scalar(select(func.sum(Launch.store_lanes))) == 40 * 300
        assert s.scalar(select(func.sum(Launch.oob_lanes))) == 0


def test_threads_sharing_one_traced_kernel():
    traced = TritonTrace(kernels.add_kernel, in_place=False)

    def work(i):
        x = torch.full((200,), float(i))
        for _ in range(3):
            out = torch.empty(200)
            traced[(2,)](x, x, out, 200, BLOCK=128)
            assert torch.equal(out, x + x)

    _run_threads(work, 4)
    assert len(traced.records) == 12
    assert all(r.summary.store_lanes == 200 for r in traced.records)
