"""Autotuners and heuristics in a compiled recording: each call of an autotuner is intercepted and framed
(``compiled_tuning``), so the launch it makes records its tuning key and chosen config, and a fresh tuning is
an ``AutotuneEvent`` with Triton's timings. Every program here is recorded with the native accessor and with
the Python capture (``capture_impl``), which must store the same rows. The runner is a CPU stand-in for
Triton's compiled launch."""

from __future__ import annotations

import threading
from collections.abc import Callable
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
from tilelens.core import patches as interpreter
from tilelens.store import History
from tilelens.store.sql.models import AutotuneEventRow, Launch

from .test_compiled_templates import StableTritonLike, _all_rows


def _events(db: Path, blobs: Path) -> list[tuple[Any, ...]]:
    with History.open(str(db), blobs) as h, h.session() as s:
        rows = s.execute(select(AutotuneEventRow).order_by(AutotuneEventRow.id)).scalars()
        return [(e.tuning_key, e.timings, e.configs, e.chosen, e.cache_hit, e.launch_id) for e in rows]


def _launch_ids(db: Path, blobs: Path) -> list[int]:
    with History.open(str(db), blobs) as h, h.session() as s:
        return list(s.execute(select(Launch.id).order_by(Launch.seq)).scalars())


def _record(tmp_path: Path, make: Callable[[], Any], program: Callable[[Any], None]) -> tuple[Any, ...]:
    """``program(kernel)`` recorded with a fresh ``make()`` (its autotuner's cache empty): the rows and the
    events. Triton's ``Autotuner.run`` is intercepted while recording and put back after."""
    kernel = make()
    db, blobs = tmp_path / "h.db", tmp_path / "b"
    with tilelens.Recording(
        str(db), blobs, backend="compiled", snapshots="none", runner=StableTritonLike()
    ) as rec:
        assert compat.Autotuner.run is not interpreter.original_run(compat.Autotuner)
        program(kernel)
    assert rec.write_failure is None
    assert compat.Autotuner.run is interpreter.original_run(compat.Autotuner)  # put back
    return _all_rows(db, blobs), _events(db, blobs)


@triton.jit
def _add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def _autotuned(configs: int = 2, **options: Any) -> Any:
    """``_add_one`` under a fresh autotuner keyed on ``n``; its benchmark gives BLOCK 32 the best time."""
    times = {8: 3.0, 16: 2.0, 32: 1.0}
    blocks = [16, 32, 8][:configs]

    def bench(kernel_call: Any, quantiles: Any = None) -> float:
        kernel_call()
        return times[bench.block]  # type: ignore[attr-defined]

    bench.block = 0  # type: ignore[attr-defined]

    def noted(nargs: dict[str, Any]) -> None:  # a config's pre_hook: which config the next trial runs
        bench.block = nargs["BLOCK"]  # type: ignore[attr-defined]

    with knobs.runtime.scope():
        knobs.runtime.interpret = False
        cfgs = [triton.Config({"BLOCK": b}, pre_hook=noted) for b in blocks]
        return triton.autotune(configs=cfgs, key=["n"], do_bench=bench, **options)(
            triton.JITFunction(_add_one.fn)
        )


def _call(kernel: Any, n: int) -> None:
    x, y = torch.arange(64, dtype=torch.float32), torch.zeros(64)
    kernel[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, y, n)
    assert torch.equal(y[:n], x[:n] + 1.0)


def test_keys_alternating_record_each_launchs_key_and_one_event_per_tuning(
    tmp_path: Path, capture_impl: Any
) -> None:
    def program(kernel: Any) -> None:
        for n in (64, 64, 48, 64, 48, 48, 40):
            _call(kernel, n)

    rows, events = _record(tmp_path, _autotuned, program)
    assert [r[0]["tuning_key"] for r in rows] == [
        f"({n}, 'torch.float32', 'torch.float32')" for n in (64, 64, 48, 64, 48, 48, 40)
    ]
    assert [e[0] for e in events] == [f"({n}, 'torch.float32', 'torch.float32')" for n in (64, 48, 40)]
    assert all(e[1] == [[2.0], [1.0]] and e[3]["kwargs"] == {"BLOCK": 32} and e[4] is False for e in events)
    # Each event is linked to the launch its tuning chose the config for: the 1st, 3rd and 7th.
    ids = _launch_ids(tmp_path / "h.db", tmp_path / "b")
    assert [e[5] for e in events] == [ids[0], ids[2], ids[6]]
    assert [r[0]["config"]["autotune"]["chosen"]["kwargs"]["BLOCK"] for r in rows] == [32] * 7


def test_an_answer_from_tritons_disk_cache_is_a_cache_hit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton's disk cache needs a GPU target; here a stand-in answers as its hit does (the config and the
    stored timings set, True returned) without benchmarking."""

    def from_disk(self: Any, tuning_key: Any, configs: Any, bench_fn: Any) -> bool:
        self.cache[tuning_key] = configs[0]
        self.configs_timings = {c: [0.5 + i] for i, c in enumerate(configs)}
        return True

    monkeypatch.setattr(compat.Autotuner, "check_disk_cache", from_disk)
    rows, events = _record(
        tmp_path, lambda: _autotuned(cache_results=True), lambda k: [_call(k, 64) for _ in range(3)]
    )
    assert len(rows) == 3 and len(events) == 1
    key, timings, configs, chosen, cache_hit, _ = events[0]
    assert timings == [[0.5], [1.5]] and chosen["kwargs"] == {"BLOCK": 16} and cache_hit is True


def test_one_config_left_by_pruning_is_an_event_without_timings_from_triton_38(tmp_path: Path) -> None:
    def prune(configs: Any, nargs: Any, **kwargs: Any) -> Any:
        return [c for c in configs if c.kwargs["BLOCK"] == 8]

    rows, events = _record(
        tmp_path,
        lambda: _autotuned(configs=3, prune_configs_by={"early_config_prune": prune}),
        lambda k: [_call(k, n) for n in (64, 64)],
    )
    assert len(events) == 1 and events[0][3]["kwargs"] == {"BLOCK": 8} and events[0][4] is False
    benchmarked = compat.TRITON_VERSION < (3, 8)  # 3.8 on take a single pruned config without a benchmark
    assert (events[0][1] is not None) is benchmarked
    assert [r[0]["config"]["constexprs"]["BLOCK"] for r in rows] == [8, 8]


def test_heuristics_over_and_under_an_autotuner_record_their_values_and_the_key(
    tmp_path: Path, capture_impl: Any
) -> None:
    @triton.jit
    def even_add(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)

    def make(under: bool) -> Any:
        with knobs.runtime.scope():
            knobs.runtime.interpret = False
            jit = triton.JITFunction(even_add.fn)
            heur = triton.heuristics({"EVEN": lambda a: a["n"] % 2 == 0})
            tune = triton.autotune(
                configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})],
                key=["n"],
                do_bench=lambda call, quantiles=None: (call(), 1.0)[1],
            )
            return tune(heur(jit)) if under else heur(tune(jit))

    for under in (True, False):
        rows, events = _record(
            tmp_path / str(under), lambda u=under: make(u), lambda k: [_call(k, n) for n in (64, 63, 64, 63)]
        )
        assert [r[0]["config"]["heuristics"] for r in rows] == [{"EVEN": True}, {"EVEN": False}] * 2
        assert [r[0]["tuning_key"] for r in rows] == [
            f"({n}, 'torch.float32', 'torch.float32')" for n in (64, 63, 64, 63)
        ]
        assert len(events) == 2 and all(e[5] is not None for e in events)  # each linked to its launch


def test_a_tuning_that_raises_leaves_no_frame_and_the_next_call_is_recorded(tmp_path: Path) -> None:
    kernel = _autotuned()
    failing = {"on": True}
    bench = kernel.do_bench

    def maybe_failing(call: Any, quantiles: Any = None) -> float:
        if failing["on"]:
            raise RuntimeError("the benchmark failed")
        return float(bench(call, quantiles=quantiles))

    kernel.do_bench = maybe_failing
    db, blobs = tmp_path / "h.db", tmp_path / "b"
    with tilelens.Recording(
        str(db), blobs, backend="compiled", snapshots="none", runner=StableTritonLike()
    ) as rec:
        with pytest.raises(RuntimeError, match="the benchmark failed"):
            _call(kernel, 64)
        assert rec._compiled is not None and rec._compiled._local.stack == []
        failing["on"] = False
        _call(kernel, 64)
        _call(kernel, 64)
    rows, events = _all_rows(db, blobs), _events(db, blobs)
    assert len(rows) == 2 and len(events) == 1 and events[0][0] == "(64, 'torch.float32', 'torch.float32')"


def test_each_thread_launches_with_its_own_key(tmp_path: Path, capture_impl: Any) -> None:
    """Frames live on the launching thread's own stack: two threads calling one autotuner with different keys
    at once each record their own key (the autotuner's attributes are shared)."""
    kernel = _autotuned()
    for n in (64, 48):  # tuned before recording: no benchmark while the threads run
        kernel.cache[(n, "torch.float32", "torch.float32")] = kernel.configs[n == 48]
    db, blobs = tmp_path / "h.db", tmp_path / "b"
    barrier = threading.Barrier(2)
    with tilelens.Recording(str(db), blobs, backend="compiled", snapshots="none", runner=StableTritonLike()):

        def worker(n: int) -> None:
            barrier.wait()
            for _ in range(20):
                _call(kernel, n)

        threads = [threading.Thread(target=worker, args=(n,)) for n in (64, 48)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    rows = _all_rows(db, blobs)
    assert len(rows) == 40
    for r in rows:
        n = next(a["value"] for a in r[1] if a["name"] == "n")
        assert r[0]["tuning_key"] == f"({n}, 'torch.float32', 'torch.float32')"
        assert r[0]["config"]["constexprs"]["BLOCK"] == (32 if n == 48 else 16)


@triton.jit
def _zero(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def test_a_launch_made_by_a_configs_pre_hook_is_the_hooks_not_the_autotuners(
    tmp_path: Path, capture_impl: Any
) -> None:
    """A config's ``pre_hook`` runs inside ``Autotuner.run`` just before the autotuner's own launch. A kernel it
    launches (here one zeroing the output) is not the autotuner's: it is recorded with no tuning key or
    config of the autotuner's (the autotuner's frame is on the stack for it too, and the router leaves it
    out: ``_frames_of``); the autotuner's launch has both, and the tuning event is linked to it."""
    with knobs.runtime.scope():
        knobs.runtime.interpret = False
        zero = triton.JITFunction(_zero.fn)

        def zeroed(nargs: dict[str, Any]) -> None:
            zero[(1,)](nargs["y_ptr"], nargs["n"], BLOCK=64)

        kernel = triton.autotune(
            configs=[
                triton.Config({"BLOCK": 16}, pre_hook=zeroed),
                triton.Config({"BLOCK": 32}, pre_hook=zeroed),
            ],
            key=["n"],
            do_bench=lambda call, quantiles=None: (call(), 1.0)[1],
        )(triton.JITFunction(_add_one.fn))
    db, blobs = tmp_path / "h.db", tmp_path / "b"
    with tilelens.Recording(str(db), blobs, backend="compiled", snapshots="none", runner=StableTritonLike()):
        for _ in range(3):
            _call(kernel, 64)
    rows, events = _all_rows(db, blobs), _events(db, blobs)
    # The trials' hook and kernel launches are the benchmark's (not recorded); then per call the hook's zeroing
    # launch, then the autotuner's.
    assert [r[0]["tuning_key"] for r in rows] == [None, "(64, 'torch.float32', 'torch.float32')"] * 3
    assert ["autotune" in r[0]["config"] for r in rows] == [False, True] * 3
    assert len(events) == 1 and events[0][5] == _launch_ids(db, blobs)[1]
