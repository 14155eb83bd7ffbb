"""The compiled launcher (``native_capture.cpp``'s ``Launcher``): a launch of a template already made is finished
in C++, every other launch is the Python router's, and either way the program gets the same result or
exception and the history the same rows as with the Python router alone (``TILELENS_NATIVE=0``)."""

from __future__ import annotations

import gc
import traceback
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import tilelens
from benchmarks.launch_parts import launcher_place
from tilelens.core import launch_pack
from tilelens.core.writer_process import ProcessWriter

from .test_compiled_fast_path import tuned_add
from .test_compiled_recording import scale_kernel
from .test_compiled_templates import StableTritonLike, _all_rows, _recording


class Boom(RuntimeError):
    pass


class FailingAt(StableTritonLike):
    """Raises ``Boom`` at its ``at``-th call (1-based), before anything of the launch (Triton's binding too)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls = at, 0
        self.raised: BaseException | None = None

    def __call__(self, jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
        self.calls += 1
        if self.calls == self.at:
            self.raised = Boom(f"launch {self.calls} failed")
            raise self.raised
        return super().__call__(jit, args, grid, kwargs)


def _program(counts: list[tuple[int, int]], launcher: Any) -> list[torch.Tensor]:
    """Launches of every kind the launcher decides on; ``counts`` gets (steady, fallbacks) after each group."""
    x = torch.arange(40, dtype=torch.float32)
    outs = [torch.zeros(40) for _ in range(3)]
    tuned_add.cache.clear()
    tuned_add.cache[(40, "torch.float32", "torch.float32")] = tuned_add.configs[0]

    def mark() -> None:
        counts.append((-1, -1) if launcher is None else (launcher.steady, launcher.fallbacks))

    for i in range(5):  # the first is Python's (no template yet), the rest like it
        scale_kernel[(3,)](x, outs[0], 40 - i, 2.0, BLOCK=16)
    mark()
    scale_kernel[(3,)](x, outs[0], 40, 2, BLOCK=16)  # an int factor: another template
    # The float one again: not the kernel's last template, found in the table, and the last again.
    scale_kernel[(3,)](x, outs[0], 40, 2.0, BLOCK=16)
    scale_kernel[(3,)](x, outs[0], 40, 3.0, BLOCK=16)  # like the last
    scale_kernel[(3,)](x, outs[0], 40, 3.0, BLOCK=16, num_warps=2)  # launch options: another template
    scale_kernel[(3,)](x, outs[0], 40, 3.0, BLOCK=16, num_warps=2)
    mark()
    for i in range(3):  # inside the autotuner's frame
        tuned_add[(2,)](x, outs[1], 40, 0.5 * i)
    mark()
    for i in range(3):  # a callable grid, called once per launch with the bound arguments
        scale_kernel[lambda m: (m["n"] // m["BLOCK"] + 1, 1)](
            x[i : i + 8], outs[2][i : i + 8], n=8, factor=-1.0, BLOCK=8
        )
    mark()
    return outs


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What the compiled launcher queued for the writer process, in order: its batches of packed launches
    (sealed by the launcher or by the writer) and the launches it could not pack (marshalled). A spy on the
    queue's ``append`` handed through ``ProcessWriter.flat_parts`` and on the writer's seal; ``_launches``
    splits the batches. Full batches are queued, not written by the launcher itself (``DIRECT_SEND`` off)."""
    from tilelens.core import writer_process

    monkeypatch.setattr(writer_process, "DIRECT_SEND", False)
    got: list[bytes] = []
    parts_of = ProcessWriter.flat_parts

    def spied_parts(writer: ProcessWriter) -> tuple[Any, ...] | None:
        parts = parts_of(writer)
        assert parts is not None
        append = parts[3]

        def spy(data: bytes) -> None:
            got.append(data)
            append(data)

        monkeypatch.setattr(writer, "_seal", lambda: writer._batch.seal(spy, writer._queued))
        return (*parts[:3], spy, *parts[4:])

    monkeypatch.setattr(ProcessWriter, "flat_parts", spied_parts)
    return got


def _launches(queued: list[bytes]) -> list[bytes]:
    """``queued``'s items one a launch: batches split into their packed items (``launch_pack.split_batch``)."""
    out: list[bytes] = []
    for data in queued:
        out.extend(launch_pack.split_batch(data) if data[0] == launch_pack.BATCH_MARK else [data])
    return out


def _recording_as(native: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Path, Path]:
    """A ``snapshots="none"`` compiled recording with the compiled module on ("1") or off ("0"), into its own
    history under ``tmp_path``: (recording, db, blobs)."""
    monkeypatch.setenv("TILELENS_NATIVE", native)
    db, blobs = tmp_path / f"n{native}.db", tmp_path / f"n{native}"
    rec = tilelens.Recording(str(db), blobs, backend="compiled", snapshots="none", runner=StableTritonLike())
    return rec, db, blobs


def _recorded_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, program: Callable[[Any], None], launches: int
) -> tuple[list[Any], list[Any], tuple[int, int, int, int]]:
    """``program(router)`` recorded with the compiled module on and off (``_recording_as``): the rows with it,
    the rows without it, and the launcher's (steady, fallbacks, plans_kept, kept) after it. Each recording must
    have written ``launches`` launches and no failure."""
    rows: dict[str, list[Any]] = {}
    counts = (0, 0, 0, 0)
    for native in ("1", "0"):
        rec, db, blobs = _recording_as(native, tmp_path, monkeypatch)
        with rec:
            router = rec._compiled
            assert router is not None
            program(router)
            if native == "1":
                launcher = router._launcher
                counts = (launcher.steady, launcher.fallbacks, launcher.plans_kept, launcher.kept)
        assert rec.write_failure is None and len(rec.launch_ids) == launches
        rows[native] = _all_rows(db, blobs)
    return rows["1"], rows["0"], counts


def test_launches_like_the_last_are_finished_by_the_launcher_and_store_the_python_routers_rows(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch, queued: list[bytes]
) -> None:
    results = {}
    for native in ("1", "0"):
        rec, db, blobs = _recording_as(native, tmp_path, monkeypatch)
        counts: list[tuple[int, int]] = []
        with rec:
            router = rec._compiled
            assert router is not None
            assert router.native_launch == (native == "1")
            outs = _program(counts, router._launcher if native == "1" else None)
        assert rec.write_failure is None and len(rec.launch_ids) == 16
        results[native] = (outs, _all_rows(db, blobs), counts)
    (outs, rows, counts), (py_outs, py_rows, _) = results["1"], results["0"]
    assert counts == [(4, 1), (7, 3), (9, 4), (11, 5)]
    # Every steady launch was queued packed (``launch_pack``), and the writer process made the same rows of them.
    launches = _launches(queued)
    assert len(launches) == 11 and all(data[0] == launch_pack.MARK for data in launches)
    assert [launch_pack.loads(data)[6][-1] for data in launches[:4]] == [2.0] * 4  # the factor, a float
    assert all(torch.equal(a, b) for a, b in zip(outs, py_outs))
    assert rows == py_rows
    assert [r[0]["grid_x"] for r in rows[-3:]] == [2, 2, 2]  # 8 // 8 + 1, from the probe's call
    assert [r[1][0]["storage_offset"] for r in rows[-3:]] == [0, 1, 2]
    assert [r[1][3]["value"] for r in rows[:5]] == [2.0] * 5 and [r[1][2]["value"] for r in rows[:5]] == [
        40,
        39,
        38,
        37,
        36,
    ]


def test_a_launchs_exception_reaches_the_program_unchanged_and_is_recorded(
    tmp_path: Path, native_module: Any
) -> None:
    x, out = torch.arange(40, dtype=torch.float32), torch.zeros(40)
    runner = FailingAt(3)
    rec = _recording(tmp_path, runner)
    with rec:
        launcher = rec._compiled._launcher  # type: ignore[union-attr]
        for _ in range(2):
            scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16)
        assert (launcher.steady, launcher.fallbacks) == (1, 1)
        with pytest.raises(Boom) as caught:
            scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16)
        scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16)
        assert (launcher.steady, launcher.fallbacks) == (2, 2)
    assert caught.value is runner.raised
    frames = [f.name for f in traceback.extract_tb(caught.value.__traceback__)]
    assert frames[-1] == "__call__"  # raised where the runner raised it, with its traceback
    rows = _all_rows(tmp_path / "h.db", tmp_path / "b")
    assert [r[0]["status"] for r in rows] == ["ok", "ok", "error", "ok"]
    assert "launch 3 failed" in rows[2][0]["error"]
    assert torch.equal(out, x * 2.0)


def test_the_launcher_lets_its_router_go_when_the_recording_ends(tmp_path: Path, native_module: Any) -> None:
    x, out = torch.arange(40, dtype=torch.float32), torch.zeros(40)
    rec = _recording(tmp_path)
    with rec:
        for _ in range(3):
            scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16)
        router = weakref.ref(rec._compiled)
        launcher = rec._compiled._launcher  # type: ignore[union-attr]
        assert launcher.steady == 2
        kind, where = type(launcher), id(launcher)
        del launcher
    rec._compiled = None
    gc.collect()
    assert router() is None  # the router <-> launcher cycle is collected
    assert not any(type(o) is kind and id(o) == where for o in gc.get_objects())


def test_a_grid_probe_calls_a_callable_grid_once_and_hands_a_tuple_on(native_module: Any) -> None:
    calls: list[dict[str, Any]] = []
    probe = native_module.GridProbe(lambda bound: calls.append(bound) or (len(bound), 1))  # type: ignore[attr-defined]
    assert (probe.bound, probe.value) == (None, None)
    bound = {"n": 3, "m": 4}
    assert probe(bound) == (2, 1) and calls == [bound] and probe.bound is bound and probe.value == (2, 1)
    fixed = native_module.GridProbe((5,))  # type: ignore[attr-defined]
    assert fixed({"n": 1}) == (5,) and fixed.value == (5,) and fixed.grid == (5,)
    with pytest.raises(TypeError):
        fixed()


class KeepingGrids(StableTritonLike):
    """Notes the id of every grid it is handed (the launcher's probe, on a steady launch) and keeps the grids of
    the launches numbered in ``keep`` (1-based), as a program's code holding on to it would."""

    def __init__(self, keep: set[int]) -> None:
        super().__init__()
        self.keep, self.calls = keep, 0
        self.ids: list[int] = []
        self.kept: dict[int, Any] = {}

    def __call__(self, jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
        self.calls += 1
        self.ids.append(id(grid))
        if self.calls in self.keep:
            self.kept[self.calls] = grid
        return super().__call__(jit, args, grid, kwargs)


def test_a_steady_launch_reuses_the_grid_probe_no_one_kept_and_never_one_kept(
    tmp_path: Path, native_module: Any
) -> None:
    x, out = torch.arange(40, dtype=torch.float32), torch.zeros(40)
    runner = KeepingGrids(keep={3})
    rec = _recording(tmp_path, runner)
    with rec:
        launcher = rec._compiled._launcher  # type: ignore[union-attr]
        assert launcher.spare_probe is None
        for i in range(5):  # 1: the router's (no template yet); 2-5 steady, each through a probe
            scale_kernel[(3,)](x, out, 40 - i, 2.0, BLOCK=16)
        assert (launcher.steady, launcher.fallbacks) == (4, 1)
        spare = launcher.spare_probe
        # Emptied: it holds neither the grid nor Triton's bound arguments of the launch that used it last.
        assert type(spare).__name__ == "GridProbe" and (spare.grid, spare.bound, spare.value) == (
            None,
            None,
            None,
        )
        assert id(spare) == runner.ids[4]
        # Launch 3 took launch 2's probe; the runner kept it, so launch 4 made another, which launch 5 took.
        assert (
            runner.ids[2] == runner.ids[1]
            and runner.ids[3] != runner.ids[2]
            and runner.ids[4] == runner.ids[3]
        )
        kept = runner.kept[3]  # still launch 3's, whole, after two launches more
        assert kept is not spare and kept.grid == (3,) and kept.value == (3,) and kept.bound["n"] == 38
        spare_id = id(spare)  # the launcher holds it, so no other object has this id meanwhile
        scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16)  # the spare is held here too: the launch makes its own
        assert runner.ids[5] != spare_id and launcher.spare_probe is spare
        del spare
        for i in range(3):  # a callable grid: the probe calls it, then lets it go
            scale_kernel[lambda m: (m["n"] // 8, 1)](x, out, 24 + 8 * i, 2.0, BLOCK=16)
        assert runner.ids[6:] == [spare_id] * 3 and id(launcher.spare_probe) == spare_id
        assert launcher.spare_probe.grid is None and (launcher.steady, launcher.fallbacks) == (8, 1)
    rows = _all_rows(tmp_path / "h.db", tmp_path / "b")
    assert [r[1][2]["value"] for r in rows] == [40, 39, 38, 37, 36, 40, 24, 32, 40]
    assert [(r[0]["grid_x"], r[0]["grid_y"], r[0]["grid_z"]) for r in rows] == [(3, 1, 1)] * 7 + [
        (4, 1, 1),
        (5, 1, 1),
    ]


def test_a_launch_from_inside_a_grid_function_gets_its_own_probe_and_both_are_recorded(
    tmp_path: Path, native_module: Any
) -> None:
    x, out, side = torch.arange(40, dtype=torch.float32), torch.zeros(40), torch.zeros(40)
    runner = KeepingGrids(keep=set())
    rec = _recording(tmp_path, runner)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        scale_kernel[(2,)](x, side, 16, 3.0, BLOCK=16)  # while the outer launch's probe is being called
        return (meta["n"] // 16 + 1,)

    with rec:
        launcher = rec._compiled._launcher  # type: ignore[union-attr]
        for _ in range(3):
            scale_kernel[(2,)](x, side, 16, 3.0, BLOCK=16)
        for i in range(3):
            scale_kernel[grid](x, out, 40 - i, 2.0, BLOCK=16)
        assert launcher.fallbacks == 1 and launcher.steady == 8  # only the very first launch was the router's
        # Each nested launch ran while the outer one held the spare: it made its own probe, which it left as
        # the spare; the outer launch's own probe was then dropped. So the outer and nested probes differ.
        outer, nested = runner.ids[3::2], runner.ids[4::2]
        assert all(o != n for o, n in zip(outer, nested))
        assert launcher.spare_probe.grid is None and launcher.spare_probe.bound is None
    rows = _all_rows(tmp_path / "h.db", tmp_path / "b")
    assert [(r[1][2]["value"], r[0]["grid_x"]) for r in rows] == [(16, 2)] * 3 + [
        (16, 2),
        (40, 3),
        (16, 2),
        (39, 3),
        (16, 2),
        (38, 3),
    ]


class Reconfiguring(StableTritonLike):
    """Disables the launcher from inside its ``at``-th launch, as another thread's ``configure()`` could."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls, self.launcher = at, 0, None

    def __call__(self, jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
        self.calls += 1
        if self.calls == self.at:
            self.launcher.configure()  # type: ignore[attr-defined]
            gc.collect()
        return super().__call__(jit, args, grid, kwargs)


def test_a_launch_finishes_with_the_configuration_it_started_with(tmp_path: Path, native_module: Any) -> None:
    x, out = torch.arange(40, dtype=torch.float32), torch.zeros(40)
    runner = Reconfiguring(3)
    rec = _recording(tmp_path, runner)
    with rec:
        launcher = runner.launcher = rec._compiled._launcher  # type: ignore[union-attr]
        for i in range(5):
            scale_kernel[(3,)](x, out, 40 - i, 2.0, BLOCK=16)
        # Launch 3 was steady though its configuration was dropped while it ran; 4 and 5 are the router's.
        assert (launcher.steady, launcher.fallbacks, launcher.enabled) == (2, 1, False)
    rows = _all_rows(tmp_path / "h.db", tmp_path / "b")
    assert [r[1][2]["value"] for r in rows] == [40, 39, 38, 37, 36]


def test_threads_launching_at_once_each_get_their_launches_recorded(
    tmp_path: Path, native_module: Any
) -> None:
    import threading
    from collections import Counter

    tuned_add.cache.clear()
    tuned_add.cache[(40, "torch.float32", "torch.float32")] = tuned_add.configs[0]
    rec = _recording(tmp_path)
    errors: list[BaseException] = []
    after_first: list[int] = []

    def work(t: int, first_round_done: threading.Barrier) -> None:
        try:
            x, out = torch.arange(40, dtype=torch.float32), torch.zeros(40)
            for i in range(100):
                scale_kernel[(3,)](x, out, 40 - (i % 7), float(t), BLOCK=16)
                tuned_add[(2,)](x, out, 40, 0.5)
                if i == 0:
                    first_round_done.wait()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with rec:
        launcher = rec._compiled._launcher  # type: ignore[union-attr]
        barrier = threading.Barrier(4, action=lambda: after_first.append(launcher.fallbacks))
        threads = [threading.Thread(target=work, args=(t, barrier)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == [] and rec.write_failure is None and len(rec.launch_ids) == 800
    # A thread's launches while no thread has finished the kernel's first one may be Python's (its frame stack,
    # the kernel's first template, the compiled kernel's metadata): some of the first round's 8. Once every
    # thread has launched each kernel once, every launch is the launcher's.
    assert launcher.steady + launcher.fallbacks == 800 and launcher.fallbacks == after_first[0] <= 8
    rows = _all_rows(tmp_path / "h.db", tmp_path / "b")
    scaled = Counter((r[1][2]["value"], r[1][3]["value"]) for r in rows if r[0]["grid_x"] == 3)
    assert scaled == Counter((40 - i % 7, float(t)) for t in range(4) for i in range(100))
    assert sum(1 for r in rows if r[0]["grid_x"] == 2) == 400


@pytest.mark.parametrize("native", ["1", "0"])
def test_threads_alternating_templates_of_one_kernel_each_get_the_template_of_their_launch(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch, native: str
) -> None:
    """Four threads each alternate between templates of the same two kernels at once, so the kernels' kept
    templates (one list per kernel, shared by the threads) change while other threads test them, and the
    autotuner's ``best_config`` (one attribute, set by every thread's call) changes between a call's choice and
    its launch: every launch is recorded with its own template (the scalar's type and the constexpr of
    scale_kernel's launches; the config its tuning key chose for tuned_add's, as the launch's constexprs and
    as the rows' chosen config), with the launcher and with the Python router alone."""
    import threading
    from collections import Counter

    tuned_add.cache.clear()
    tuned_add.cache[(40, "torch.float32", "torch.float32")] = tuned_add.configs[0]
    tuned_add.cache[(48, "torch.float32", "torch.float32")] = tuned_add.configs[1]
    tuned_add.cache[(44, "torch.float32", "torch.float32")] = tuned_add.configs[0]
    blocks = {n: tuned_add.cache[(n, "torch.float32", "torch.float32")].kwargs["BLOCK"] for n in (40, 48, 44)}
    rec, db, blobs = _recording_as(native, tmp_path, monkeypatch)
    errors: list[BaseException] = []
    rounds = 60

    def work(t: int) -> None:
        try:
            x, out = torch.arange(48, dtype=torch.float32), torch.zeros(48)
            for _ in range(rounds):
                scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16)
                scale_kernel[(3,)](x, out, 40, t, BLOCK=16)
                scale_kernel[(6,)](x, out, 40, 2.0, BLOCK=8)
                for n in (40, 48, 44):
                    tuned_add[(2,)](x, out, n, 0.5)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with rec:
        launcher = rec._compiled._launcher  # type: ignore[union-attr]
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == [] and rec.write_failure is None and len(rec.launch_ids) == 4 * rounds * 6
    # Two kernels at one place (1 in 64) take turns there and keep nothing.
    apart = launcher_place(scale_kernel) != launcher_place(tuned_add.fn.fn)
    assert (launcher.kept > 0 or not apart) if native == "1" else launcher is None
    rows = _all_rows(db, blobs)
    scaled = Counter(
        (r[1][3]["value_type"], r[1][3]["value"], r[0]["config"]["constexprs"]["BLOCK"])
        for r in rows
        if "autotune" not in r[0]["config"]
    )
    assert scaled == Counter(
        {("float", 2.0, 16): 4 * rounds, ("float", 2.0, 8): 4 * rounds}
        | {("int", t, 16): rounds for t in range(4)}
    )
    tuned = Counter(
        (
            r[1][2]["value"],
            r[0]["config"]["constexprs"]["BLOCK"],
            r[0]["config"]["autotune"]["chosen"]["kwargs"]["BLOCK"],
            r[0]["config"]["options"]["num_warps"],
            r[0]["config"]["autotune"]["chosen"]["num_warps"],
        )
        for r in rows
        if "autotune" in r[0]["config"]
    )
    warps = {n: tuned_add.cache[(n, "torch.float32", "torch.float32")].num_warps for n in (40, 48, 44)}
    assert tuned == Counter({(n, blocks[n], blocks[n], warps[n], warps[n]): 4 * rounds for n in (40, 48, 44)})


def _sent_in_order(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[int]]:
    """Every item the writer's feeder hands on, decoded, in order, and the launches in each batch among them
    (a spy on ``ProcessWriter._send``). Full batches are queued, not written by the launcher itself
    (``writer_process.DIRECT_SEND`` off: ``test_batch_direct_send`` covers that path), so the spy sees them all."""
    from tilelens.core import writer_process

    monkeypatch.setattr(writer_process, "DIRECT_SEND", False)
    sent: list[Any] = []
    batches: list[int] = []
    send = ProcessWriter._send

    def spy(writer: ProcessWriter, items: list[Any]) -> None:
        batches.extend(
            launch_pack.launch_count(i) for i in items if type(i) is bytes and i[0] == launch_pack.BATCH_MARK
        )
        sent.extend(launch_pack.decode_items(items))
        send(writer, items)

    monkeypatch.setattr(ProcessWriter, "_send", spy)
    return sent, batches


def test_the_writer_process_reads_every_item_in_the_programs_order(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steady launches wait in the launcher's batch while the Python router queues its own items (a new
    template, its launch, the autotuner's): the batch is sealed before anything queued after it, so the writer
    process reads the launches in launch order, each template defined before its first launch."""
    sent, batches = _sent_in_order(monkeypatch)
    rec, _, _ = _recording_as("1", tmp_path, monkeypatch)
    counts: list[tuple[int, int]] = []
    with rec:
        router = rec._compiled
        assert router is not None
        _program(counts, router._launcher)
    assert rec.write_failure is None and len(rec.launch_ids) == 16
    numbers = [item[1] for item in sent if item[0] in ("l", "m")]
    assert numbers == list(range(numbers[0], numbers[0] + 16))
    defined: set[int] = set()
    for item in sent:
        if item[0] == "t":
            defined.add(item[1])
        elif item[0] == "m":
            assert item[2] in defined
    assert sum(batches) == counts[-1][0] == 11  # every steady launch arrived in a batch


def test_the_launcher_seals_a_full_batch_and_waits_while_the_queue_is_full(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch holding ``BATCH_BYTES`` is queued by the launcher itself; past ``BATCHES_QUEUED`` queued
    items, the launcher waits for the feeder (``_wait_for_feeder`` with that limit)."""
    from tilelens.core import writer_process

    sent, batches = _sent_in_order(monkeypatch)
    monkeypatch.setattr(writer_process, "BATCH_BYTES", 1)  # every packed launch fills a batch
    monkeypatch.setattr(writer_process, "BATCHES_QUEUED", 0)  # and every queued one fills the queue
    waits: list[int] = []
    wait = ProcessWriter._wait_for_feeder

    def spy(writer: ProcessWriter, limit: int = writer_process.QUEUE_SIZE) -> None:
        waits.append(limit)
        wait(writer, limit)

    monkeypatch.setattr(ProcessWriter, "_wait_for_feeder", spy)
    rec, _, _ = _recording_as("1", tmp_path, monkeypatch)
    x, out = torch.arange(40, dtype=torch.float32), torch.zeros(40)
    with rec:
        for i in range(6):
            scale_kernel[(3,)](x, out, 40 - i, 2.0, BLOCK=16)
        assert rec._writer._batch.launches == 0  # each sealed as it was packed
    assert rec.write_failure is None and len(rec.launch_ids) == 6
    assert batches == [1] * 5 and waits == [0] * 5
    numbers = [item[1] for item in sent if item[0] in ("l", "m")]
    assert numbers == list(range(numbers[0], numbers[0] + 6))


def test_a_steady_launch_with_an_int_past_64_bits_is_marshalled_and_stores_the_python_routers_rows(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch, queued: list[bytes]
) -> None:
    """The packed form holds 64-bit ints only: a launch whose scalar is past that is captured again into a
    list and marshalled, and the next launch like it is packed again."""
    x, out = torch.arange(40, dtype=torch.float32), torch.zeros(40)

    def program(router: Any) -> None:
        for n in (40, 2**63 + 5, 39):  # the first makes the template; the other two are like it
            scale_kernel[(1,)](x, out, n, 2.0, BLOCK=16)

    rows, py_rows, _ = _recorded_both_ways(tmp_path, monkeypatch, program, 3)
    assert rows == py_rows
    assert [rows[i][1][2]["value"] for i in (0, 2)] == [40, 39]
    launches = _launches(queued)
    assert [data[0] == launch_pack.MARK for data in launches] == [False, True]
    assert launch_pack.loads(launches[0])[6][6] == 2**63 + 5


def test_one_kernel_launched_through_different_layers_takes_each_layers_template(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same JITFunction launched through its autotuner (a tuner and a heuristics frame), through its
    heuristics layer (one frame) and directly (none), in turn: every launch differs from the kernel's last
    template in its frames, so the launcher finds each in the templates table, and stores the Python
    router's rows."""
    x = torch.arange(40, dtype=torch.float32)
    tuned_add.cache.clear()
    tuned_add.cache[(40, "torch.float32", "torch.float32")] = tuned_add.configs[0]
    block = tuned_add.configs[0].kwargs["BLOCK"]

    def program(router: Any) -> None:
        outs = [torch.zeros(40) for _ in range(3)]
        for _ in range(3):
            tuned_add[(2,)](x, outs[0], 40, 0.5)
            tuned_add.fn[(2,)](x, outs[1], 40, 0.5, BLOCK=block)
            tuned_add.fn.fn[(2,)](x, outs[2], 40, 0.5, BLOCK=block, EVEN=True)

    rows, py_rows, counts = _recorded_both_ways(tmp_path, monkeypatch, program, 9)
    assert counts[:2] == (6, 3)  # each layer's first launch makes its template; the rest are found
    assert rows == py_rows


def test_a_kernel_alternating_between_templates_finds_each_among_its_kept_ones(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel launched in turn with a few templates (one matmul at a layer's projection shapes, each with
    its own tuning) finds each one among its kept templates (``KeptTemplates``: the key's objects and its
    options and frames as words) instead of testing its last template and looking its key up: the launcher
    keeps each template its slower tests find, so the first round is Python's, the second looks each up once,
    and every later launch is found among the kept ones. Tuning keys and configs differ between the templates
    (the frames), as do a constexpr and a scalar's type (the signature); the rows are the Python router's."""
    x = torch.arange(48, dtype=torch.float32)
    tuned_add.cache.clear()
    tuned_add.cache[(40, "torch.float32", "torch.float32")] = tuned_add.configs[0]
    tuned_add.cache[(48, "torch.float32", "torch.float32")] = tuned_add.configs[1]
    tuned_add.cache[(44, "torch.float32", "torch.float32")] = tuned_add.configs[
        0
    ]  # differs from 40's in frames only
    assert tuned_add.configs[0].kwargs != tuned_add.configs[1].kwargs
    rounds = 4

    def program(router: Any) -> None:
        out = torch.zeros(48)
        for _ in range(rounds):
            scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16)
            scale_kernel[(3,)](x, out, 40, 2, BLOCK=16)  # an int factor: another signature
            scale_kernel[(6,)](x, out, 40, 2.0, BLOCK=8)  # another constexpr
            tuned_add[(2,)](x, out, 40, 0.5)
            tuned_add[(2,)](x, out, 48, 0.5)  # another tuning key and config: other frames
            tuned_add[(2,)](x, out, 44, 0.5)  # another tuning key, 40's config: its frames tell it apart

    launches = 6 * rounds
    rows, py_rows, counts = _recorded_both_ways(tmp_path, monkeypatch, program, launches)
    assert rows == py_rows
    steady, fallbacks, _, kept = counts
    assert (steady, fallbacks) == (launches - 6, 6)  # round 1 makes the six templates (Python)
    # Round 2: every launch differs from its kernel's last template and nothing is kept yet: each is looked up
    # and kept. Later rounds: all six found among the kept ones. Two kernels at one place (1 in 64) take turns
    # there and keep nothing.
    apart = launcher_place(scale_kernel) != launcher_place(tuned_add.fn.fn)
    assert kept == (6 * (rounds - 2) if apart else 0)
    chosen = [r[0]["config"]["autotune"]["chosen"]["kwargs"] for r in rows if "autotune" in r[0]["config"]]
    assert chosen == [tuned_add.configs[i].kwargs for i in (0, 1, 0)] * rounds
    blocks = [r[0]["config"]["constexprs"]["BLOCK"] for r in rows if "autotune" not in r[0]["config"]]
    assert blocks == [16, 16, 8] * rounds


def test_launch_options_are_told_apart_by_value_and_order_as_the_python_router_does(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher compares a launch's options with its kernel's last template in place (the plan of the
    call's keyword names): another value is another template, a template made earlier is found again in
    the table, the same options in another order are another template (their stored order differs), and
    the rows are the Python router's."""
    x = torch.arange(40, dtype=torch.float32)

    def program(router: Any) -> None:
        out = torch.zeros(40)
        for warps in (2, 2, 4, 4, 2):
            scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16, num_warps=warps)
        scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16, num_warps=4, num_stages=1)
        scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16, num_stages=1, num_warps=4)

    rows, py_rows, counts = _recorded_both_ways(tmp_path, monkeypatch, program, 7)
    assert rows == py_rows
    assert counts[:2] == (3, 4)  # made in Python: the first 2, the first 4, and each num_stages order
    assert [r[0]["config"]["options"] for r in rows] == [
        *({"num_warps": w} for w in (2, 2, 4, 4, 2)),
        {"num_warps": 4, "num_stages": 1},
        {"num_stages": 1, "num_warps": 4},
    ]


def test_a_kept_template_takes_a_launch_only_when_its_options_are_the_same_words(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel's kept templates (``KeptTemplates``) compare a launch's options as words (``KeyWords``): an
    int, a float and a bool by type and value, a short ASCII str by its text, a longer str by identity, an int
    past 64 bits not at all. Equal words imply an equal key; a value Python finds equal to a kept one but the
    words tell apart (1.0 and True for 1, an equal long str made anew) or cannot hold takes the slower tests,
    which find the template Python's lookup finds. The rows are the Python router's, and the counts say which
    launches the kept ones took."""
    x = torch.arange(40, dtype=torch.float32)
    same = "".join(["a", "b"])  # equal to the two made anew before it: found by its text
    long = "x" * 40  # past the words' text: by identity
    values: list[Any] = [1, 1, 1, 1.0, True, 1, "".join(["a", "b"]), "".join(["a", "b"]), same, same]
    values += ["".join(["x"] * 40), "".join(["x"] * 40), long, long, 2**70, 2**70]

    def program(router: Any) -> None:
        out = torch.zeros(40)
        for value in values:
            scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16, maxnreg=value)

    rows, py_rows, counts = _recorded_both_ways(tmp_path, monkeypatch, program, len(values))
    assert rows == py_rows
    # Python's: the first launch with 1, the first "ab" (not equal to 1), the first long str and the first
    # 2**70. The second launch with 1 has no words yet (its plan is filed under its names then); the third is
    # kept; 1.0 and True are kept apart from it after the slower tests find 1's template; the fourth 1 is found
    # among the kept ones, and so is every "ab" after the second (kept); of the long ones only the second
    # `long` (the first was kept by its identity); 2**70 has no words.
    assert counts[:2] == (len(values) - 4, 4)
    assert counts[3] == 4
    assert [r[0]["config"]["options"]["maxnreg"] for r in rows] == [1] * 6 + ["ab"] * 4 + [long] * 4 + [
        2**70
    ] * 2


def test_tuning_keys_equal_in_value_are_the_same_frames_and_others_are_not(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frames' tuning key values are compared as Python's ``==`` compares them (``equal_values``): a key
    int made anew each launch (not the cached small int) is the same frames as the last launch's, another
    value is not (had the launcher taken 302 for 300, the row would name the other tuning); the rows are the
    Python router's."""
    x = torch.arange(300, dtype=torch.float32)
    tuned_add.cache.clear()
    for n in (300, 302):
        tuned_add.cache[(n, "torch.float32", "torch.float32")] = tuned_add.configs[0]
    sizes = ["300", "300", "300", "300", "302", "302"]

    def program(router: Any) -> None:
        out = torch.zeros(302)
        for size in sizes:
            n = int(size)  # a new int object each launch
            tuned_add[(2,)](x, out, n, 0.5)

    rows, py_rows, counts = _recorded_both_ways(tmp_path, monkeypatch, program, len(sizes))
    assert rows == py_rows
    assert counts[:2] == (4, 2)  # Python's: the first launch with 300, and the first with 302


def test_a_cleared_metadata_cache_is_read_again_by_the_launcher(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher keeps the metadata it found for a kernel's compiled kernel (``MetaCache``) until the
    router clears its metadata cache (past 4096 compiled kernels), which the router announces: the next
    launch of that compiled kernel takes the metadata the router reads anew, as the Python path does."""
    x = torch.arange(40, dtype=torch.float32)

    def program(router: Any) -> None:
        out = torch.zeros(40)
        for _ in range(3):
            scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16, num_warps=2)
        # Full: the next compiled kernel's metadata clears the cache, the 2-warp kernel's entry with it.
        router._metadata_cache.update({-i: (object(), {}) for i in range(1, 4098)})
        scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16, num_warps=4)
        assert len(router._metadata_cache) == 1
        for _ in range(2):
            scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16, num_warps=2)

    rows, py_rows, counts = _recorded_both_ways(tmp_path, monkeypatch, program, 6)
    assert rows == py_rows
    # Python's: the first launch, the first with 4 warps, and the first with 2 after the clear (its metadata
    # is read anew: another template, as the Python router makes it).
    assert counts[:2] == (3, 3)


def test_options_from_a_new_names_tuple_each_call_are_compared_by_name_for_each_kernel(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``f(**options)`` makes a new tuple of keyword names every call, as Triton's autotuner does. The launcher
    keeps, per kernel, the plan it last found in the kernel's table and where its names are (``PlanCache``),
    and compares the next call's names with them by identity: two kernels launched in turn each keep theirs.
    Another value, or the same names in another order, is still told apart; the rows are the Python
    router's."""
    x = torch.arange(40, dtype=torch.float32)
    block = tuned_add.configs[0].kwargs["BLOCK"]
    plain = tuned_add.fn.fn
    calls: list[tuple[Any, dict[str, Any]]] = []
    for warps in (2, 2, 2, 4, 4, 4):
        calls.append((scale_kernel, {"BLOCK": 16, "num_warps": warps}))
        calls.append((plain, {"BLOCK": block, "EVEN": True, "num_stages": 1, "num_warps": warps}))
    # The names in another order: scale_kernel's options are still (num_warps,), the same template; the
    # plain kernel's are (num_warps, num_stages), another.
    calls += [(scale_kernel, {"num_warps": 4, "BLOCK": 16})] * 3
    calls += [(plain, {"num_warps": 4, "num_stages": 1, "BLOCK": block, "EVEN": True})] * 3

    def program(router: Any) -> None:
        outs = [torch.zeros(40), torch.zeros(40)]
        for kernel, options in calls:
            if kernel is scale_kernel:
                kernel[(3,)](x, outs[0], 40, 2.0, **dict(options))
            else:
                kernel[(2,)](x, outs[1], 40, 0.5, **dict(options))

    rows, py_rows, counts = _recorded_both_ways(tmp_path, monkeypatch, program, len(calls))
    assert rows == py_rows
    # Python's: each kernel's first launch with 2 warps and with 4, and the plain kernel's first in the other
    # order. The launcher finds a plan once the table holds it under the names as the call came (it files it
    # there at the launch after the plan was made) and keeps it from then: each kernel's third launch with 2
    # warps, its fifth and sixth (the fourth, the first with 4 warps, ran a new compiled kernel whose metadata
    # only Python knows yet) and its third in the other order read their options through it: 8. A template is
    # kept when the slower tests find it for a launch whose options were read so (each kernel's third launch
    # with 2 warps, its fifth, its third in the other order), so each kernel's sixth launch is found among
    # its kept templates: 2. Two kernels at one place (1 in 64) take turns there and keep nothing.
    apart = launcher_place(scale_kernel) != launcher_place(plain)
    assert counts == ((13, 5, 8, 2) if apart else (13, 5, 0, 0))
    assert [r[0]["config"]["options"] for r in rows[:2]] == [
        {"num_warps": 2},
        {"num_stages": 1, "num_warps": 2},
    ]
    assert [list(r[0]["config"]["options"]) for r in rows[-6:]] == [
        *(["num_warps"] for _ in range(3)),
        *(["num_warps", "num_stages"] for _ in range(3)),
    ]


def test_steady_launches_are_timed_by_the_clocks_the_router_would_read(
    tmp_path: Path, native_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``time.time``/``time.perf_counter`` as they are, the launcher reads the same clocks itself; a
    replaced clock (configured after the change) is called, as the router calls it."""
    import datetime as dt
    import time

    from sqlalchemy import select

    from tilelens.store import History
    from tilelens.store.models import Launch

    def started(db: Path, blobs: Path) -> list[tuple[float, float]]:
        with History.open(str(db), blobs) as h, h.session() as s:
            rows = s.execute(select(Launch).order_by(Launch.seq)).scalars()
            return [(r.started_at.replace(tzinfo=dt.timezone.utc).timestamp(), r.duration_s) for r in rows]

    x, out = torch.arange(40, dtype=torch.float32), torch.zeros(40)
    before = time.time()
    rec = _recording(tmp_path)
    with rec:
        for _ in range(6):
            scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16)
        assert rec._compiled is not None and rec._compiled._launcher.steady == 5
    after = time.time()
    times = started(tmp_path / "h.db", tmp_path / "b")
    assert len(times) == 6
    assert all(before - 1e-3 <= t <= after + 1e-3 and 0 <= d <= after - before for t, d in times)
    assert [t for t, _ in times] == sorted(t for t, _ in times)

    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.25)
    ticks = iter(range(1000))
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)) * 0.5)
    rec = tilelens.Recording(
        str(tmp_path / "f.db"),
        tmp_path / "f",
        backend="compiled",
        snapshots="none",
        runner=StableTritonLike(),
    )
    with rec:
        for _ in range(4):
            scale_kernel[(3,)](x, out, 40, 2.0, BLOCK=16)
        assert rec._compiled is not None and rec._compiled._launcher.steady == 3
    assert started(tmp_path / "f.db", tmp_path / "f") == [(1_700_000_000.25, 0.5)] * 4
