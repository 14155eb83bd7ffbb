"""Compiled recording (``backend="compiled"``) on a machine without a GPU.

The compiled launch is replaced by a stand-in runner that interprets the kernel with TileLens's
compiled-Triton semantics and returns an object shaped like Triton's ``CompiledKernel``; everything around the
launch (interception, autotune frames with real timings, heuristics, snapshots, the background writer, the
rows) is the production code. The GPU itself is exercised by ``tests/end_to_end/test_compiled_gpu.py``.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from sqlalchemy import select
from triton import knobs

import tilelens
from tilelens.core import compat
from tilelens.core.compiled.snapshots import SnapshotPolicy
from tilelens.core.patches import compiled_semantics, make_interpreted
from tilelens.errors import UsageError
from tilelens.store import History
from tilelens.store.sql.models import AutotuneEventRow, Launch, LaunchArg

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, factor, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)

    @triton.jit
    def failing_kernel(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)  # BLOCK=3: not a power of two
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)


class StandIn:
    """Runs a "compiled" launch in the interpreter; counts launches; returns a CompiledKernel look-alike."""

    def __init__(self) -> None:
        self.launches: list[str] = []
        self._interpreted: dict[int, Any] = {}

    def __call__(self, jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
        interp = self._interpreted.get(id(jit))
        if interp is None:
            interp = self._interpreted[id(jit)] = make_interpreted(jit.fn)
        self.launches.append(jit.fn.__name__)
        with compiled_semantics():
            interp.run(*args, grid=grid, warmup=False, **kwargs)
        meta = types.SimpleNamespace(shared=256, num_warps=kwargs.get("num_warps", 4), num_stages=3)
        return types.SimpleNamespace(metadata=meta, n_regs=40, n_spills=0)


def _history(tmp_path: Path) -> History:
    return History.open(str(tmp_path / "h.db"), tmp_path / "b")


def _record(tmp_path: Path, body: Any, **options: Any) -> tuple[Any, StandIn]:
    runner = StandIn()
    rec = tilelens.Recording(
        str(tmp_path / "h.db"), tmp_path / "b", backend="compiled", runner=runner, **options
    )
    with rec:
        body()
    return rec, runner


def test_compiled_launches_record_everything_but_the_trace(tmp_path: Path) -> None:
    x = torch.arange(100, dtype=torch.float32)
    y = torch.zeros(100)
    expected = x * 2.0

    def body() -> None:
        scale_kernel[(4,)](x, y, 100, 2.0, BLOCK=32, num_warps=2)

    rec, runner = _record(tmp_path, body)
    assert torch.equal(y, expected)
    assert runner.launches == ["scale_kernel"]
    with _history(tmp_path) as h, h.session() as s:
        launch = s.execute(select(Launch)).scalar_one()
        assert (launch.backend, launch.status, launch.grid, launch.device) == (
            "compiled",
            "ok",
            (4, 1, 1),
            "cpu",
        )
        assert launch.trace_blob is None and launch.trace_derived is None
        assert launch.config["constexprs"] == {"BLOCK": 32}
        assert launch.config["options"] == {"num_warps": 2}
        assert launch.config["compiled"] == {
            "shared": 256,
            "num_warps": 2,
            "num_stages": 3,
            "n_regs": 40,
            "n_spills": 0,
        }
        args = {a.name: a for a in s.execute(select(LaunchArg)).scalars()}
        assert args["factor"].value_type == "float"
        assert h.blobs.get_tensor(args["x_ptr"].before_blob).tolist() == x.tolist()
        assert args["x_ptr"].after_blob == args["x_ptr"].before_blob  # unchanged: stored once
        assert h.blobs.get_tensor(args["y_ptr"].before_blob).tolist() == [0.0] * 100
        assert h.blobs.get_tensor(args["y_ptr"].after_blob).tolist() == expected.tolist()
    assert rec.launch_ids == [launch.id]


def test_many_launches_are_written_in_order_by_the_background_writer(tmp_path: Path) -> None:
    x = torch.ones(8)
    ys = [torch.zeros(8) for _ in range(40)]

    def body() -> None:
        for i, y in enumerate(ys):
            scale_kernel[(1,)](x, y, 8, float(i), BLOCK=8)

    rec, _ = _record(tmp_path, body, snapshots="none")
    assert [y[0].item() for y in ys] == [float(i) for i in range(40)]
    with _history(tmp_path) as h, h.session() as s:
        rows = s.execute(select(Launch.seq, Launch.id).order_by(Launch.seq)).all()
        assert [r.seq for r in rows] == list(range(40))
        factors = s.execute(
            select(LaunchArg.value).where(LaunchArg.name == "factor").order_by(LaunchArg.launch_id)
        ).scalars()
        assert [float(v) for v in factors] == [float(i) for i in range(40)]
        blobs = s.execute(select(LaunchArg.before_blob).where(LaunchArg.kind == "tensor")).scalars().all()
        assert blobs and all(b is None for b in blobs)  # snapshots="none": rows without snapshots
    assert rec.unsnapshotted == 40


def test_snapshots_first_keeps_one_launch_per_kernel_version_and_shape(tmp_path: Path) -> None:
    def body() -> None:
        for n in (8, 8, 16, 8, 16):
            scale_kernel[(1,)](torch.ones(n), torch.zeros(n), n, 1.0, BLOCK=16)

    _record(tmp_path, body, snapshots="first")
    with _history(tmp_path) as h, h.session() as s:
        rows = s.execute(
            select(Launch.seq, LaunchArg.before_blob)
            .join(LaunchArg, LaunchArg.launch_id == Launch.id)
            .where(LaunchArg.name == "x_ptr")
            .order_by(Launch.seq)
        ).all()
        assert [b is not None for _seq, b in rows] == [True, False, True, False, False]


def test_kernel_filter_and_budget_limit_snapshots() -> None:
    from tilelens.core.kernel.arguments import describe_arguments, kernel_params
    from tilelens.core.kernel.identity import kernel_identity

    ident = kernel_identity(scale_kernel)
    params = kernel_params(scale_kernel.fn)
    args = describe_arguments(params, {"x_ptr": torch.ones(10), "y_ptr": torch.ones(10), "n": 10}, False)
    assert not SnapshotPolicy("all", kernels=("other*",)).wants(ident, args)
    assert SnapshotPolicy("all", kernels=("scale_*",)).wants(ident, args)
    budget = SnapshotPolicy("all", budget_bytes=2 * 2 * 40 + 10)  # before+after of two 40-byte tensors
    assert budget.wants(ident, args)
    assert not budget.wants(ident, args)
    assert (budget.used_bytes, budget.skipped) == (160, 1)
    with pytest.raises(ValueError, match="snapshots must be one of"):
        SnapshotPolicy("some")  # type: ignore[arg-type]


def test_a_failing_compiled_launch_is_recorded_and_raises_unchanged(tmp_path: Path) -> None:
    x = torch.zeros(4)

    def body() -> None:
        failing_kernel[(1,)](x, BLOCK=3)

    with pytest.raises(Exception) as info:
        _record(tmp_path, body)
    with _history(tmp_path) as h, h.session() as s:
        launch = s.execute(select(Launch)).scalar_one()
        assert launch.status == "error" and launch.backend == "compiled"
        assert "arange's range must be a power of 2" in (launch.error or "")
    assert "power of 2" in str(info.value)


def test_autotuning_is_tritons_own_with_real_timings(tmp_path: Path) -> None:
    timings = {16: [3.0, 2.5, 3.5], 32: [1.0, 0.5, 1.5]}
    benched: list[int] = []

    def bench(kernel_call: Any, quantiles: Any = None) -> list[float]:
        kernel_call()  # the spy below notes which config this trial launched
        return list(timings[benched[-1]])

    with knobs.runtime.scope():
        knobs.runtime.interpret = False

        @triton.autotune(
            configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"], do_bench=bench
        )
        @triton.heuristics({"EVEN": lambda a: a["n"] % 2 == 0})
        @triton.jit
        def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)

    x, y = torch.arange(64, dtype=torch.float32), torch.zeros(64)
    runner = StandIn()
    original = runner.__call__

    def spy(jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
        benched.append(kwargs["BLOCK"])
        return original(jit, args, grid, kwargs)

    rec = tilelens.Recording(str(tmp_path / "h.db"), tmp_path / "b", backend="compiled", runner=spy)
    with rec:
        tuned[lambda m: (triton.cdiv(64, m["BLOCK"]),)](x, y, 64)
        tuned[lambda m: (triton.cdiv(64, m["BLOCK"]),)](x, y, 64)  # cached: no second tuning
    assert torch.equal(y, x + 1.0)
    assert benched == [16, 32, 32, 32]  # two trials, then the chosen config twice
    assert tuned.best_config.kwargs == {"BLOCK": 32}  # the user's autotuner, not a copy
    assert list(tuned.cache.values())[0].kwargs == {"BLOCK": 32}
    with _history(tmp_path) as h, h.session() as s:
        launches = s.execute(select(Launch).order_by(Launch.seq)).scalars().all()
        assert len(launches) == 2  # the benchmark launches are not recorded
        first = launches[0]
        assert first.config["autotune"]["chosen"]["kwargs"] == {"BLOCK": 32}
        assert first.config["heuristics"] == {"EVEN": True}
        assert first.config["constexprs"] == {"BLOCK": 32, "EVEN": True}
        assert first.grid == (2, 1, 1) and first.tuning_key == "(64, 'torch.float32', 'torch.float32')"
        event = s.execute(select(AutotuneEventRow)).scalar_one()
        assert event.timings == [[3.0, 2.5, 3.5], [1.0, 0.5, 1.5]]
        assert [c["kwargs"] for c in event.configs] == [{"BLOCK": 16}, {"BLOCK": 32}]
        assert event.chosen["kwargs"] == {"BLOCK": 32}
        assert event.launch_id == first.id and event.cache_hit is False


def test_bad_snapshot_mode_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="snapshots must be one of"):
        tilelens.Recording(str(tmp_path / "h.db"), tmp_path / "b", backend="compiled", snapshots="most")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="backend must be"):
        tilelens.Recording(str(tmp_path / "h.db"), tmp_path / "b", backend="gpu")  # type: ignore[arg-type]


def test_compile_metadata_reads_what_the_kernel_exposes() -> None:
    kernel = types.SimpleNamespace(
        metadata=types.SimpleNamespace(
            shared=1024, num_warps=8, num_stages=2, target=types.SimpleNamespace(arch=90)
        ),
        n_regs=64,
        n_spills=2,
    )
    assert compat.compile_metadata(kernel) == {
        "shared": 1024,
        "num_warps": 8,
        "num_stages": 2,
        "arch": "90",
        "n_regs": 64,
        "n_spills": 2,
    }
    assert compat.compile_metadata(None) == {}


def test_nothing_is_lost_when_the_program_raises(tmp_path: Path) -> None:
    x = torch.ones(8)

    def body() -> None:
        for _ in range(25):
            scale_kernel[(1,)](x, torch.zeros(8), 8, 1.0, BLOCK=8)
        raise KeyError("the program's own failure")

    with pytest.raises(KeyError):
        _record(tmp_path, body)
    with _history(tmp_path) as h, h.session() as s:
        from tilelens.store.sql.models import Run

        assert s.execute(select(Run.status)).scalar_one() == "failed"
        assert len(s.execute(select(Launch.id)).all()) == 25
