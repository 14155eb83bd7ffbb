"""Templated compiled launches (``tilelens.core.compiled.templates``, ``tilelens.store.write.templated_rows``): a launch
sent as its template plus a flat tuple of what varies stores exactly what the raw launch stores.

Checked three ways: a template expanded with a launch's values is that launch's raw launch, element by element
(also after the marshal round trip the writer process does); a change in any argument's kind (dtype, shape,
strides, scalar type, constexpr) is a different signature, a change in pointers or values is not; and a
recording through the writer process (templated, rows from templates) stores the same rows, column by column,
as the thread writer (raw launches, the usual rows).
"""

from __future__ import annotations

import copy
import marshal
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from sqlalchemy import select
from triton import knobs

import tilelens
from tilelens.core import session
from tilelens.core.compiled.frames import GridProbe
from tilelens.core.compiled.router import CompiledRouter
from tilelens.core.compiled.snapshots import SnapshotPolicy
from tilelens.core.compiled.templates import LIMIT, Templates, body_of, capture, expand, slots_of
from tilelens.store import History
from tilelens.store.sql.models import AutotuneEventRow, Launch, LaunchArg

from .test_compiled_capture import many_kinds
from .test_compiled_fast_path import TritonLike, tuned_add
from .test_compiled_recording import scale_kernel


def _bound(**changes: Any) -> dict[str, Any]:
    base = torch.arange(40, dtype=torch.float32)
    bound: dict[str, Any] = {
        "x_ptr": base,
        "y_ptr": torch.zeros(3, 5, dtype=torch.bfloat16).t(),  # non-contiguous
        "alias_ptr": base[8:],  # x's storage: one storage group, an offset
        "view": torch.zeros(6, dtype=torch.int32),
        "n": 7,
        "scale": 0.5,
        "flag": True,
        "missing": None,
        "BLOCK": 16,
        "MODE": "fast",
    }
    bound.update(changes)
    return bound


def test_a_template_expanded_with_a_launchs_values_is_its_raw_launch(capture_impl: Any) -> None:
    router = CompiledRouter(sink=None)
    k = router._kernel(many_kinds)
    for bound in (_bound(), _bound(n=-3, scale=float("nan"), flag=False, view=torch.ones(2, 3)[:, 1])):
        probe = GridProbe((3, 2))
        probe(bound)
        raw = router._raw(k, None, (), None, probe, {"num_warps": 2}, [], None, None, 1.5, 0.25)
        got = capture_impl(k.flat_plan, bound, None)
        assert got is not None
        _sig, values = got
        body = body_of(raw, slots_of(k.params, bound))
        assert expand(body, 1.5, 0.25, raw[1], values) == raw
        # As the writer process gets them: marshalled, unmarshalled.
        body2, values2 = marshal.loads(marshal.dumps(body)), marshal.loads(marshal.dumps(values))
        assert repr(expand(body2, 1.5, 0.25, raw[1], values2)) == repr(raw)  # nan != nan: compared as text
        assert raw[1] == (3, 2, 1) and raw[3] == {"num_warps": 2}
        assert [s for s in body[1]] == [
            (0, True),
            (1, True),
            (2, True),
            (3, True),
            (4, False),
            (5, False),
            (6, False),
        ]


def test_any_change_of_an_arguments_kind_is_another_signature_and_pointers_or_values_are_not(
    capture_impl: Any,
) -> None:
    router = CompiledRouter(sink=None)
    plan = router._kernel(many_kinds).flat_plan

    def sig(**changes: Any) -> Any:
        got = capture_impl(plan, _bound(**changes), None)
        assert got is not None
        return tuple(got[0]) if type(got[0]) is list else got[0]

    base = sig()
    changed = [
        sig(x_ptr=torch.arange(40, dtype=torch.float64)),  # dtype
        sig(x_ptr=torch.arange(41, dtype=torch.float32)),  # shape
        sig(y_ptr=torch.zeros(5, 3, dtype=torch.bfloat16)),  # strides (the same shape, contiguous)
        sig(view=torch.zeros(1, dtype=torch.int32).expand(6)),  # stride 0
        sig(n=7.0),  # int -> float
        sig(n=True),  # int -> bool
        sig(flag=1),  # bool -> int
        sig(missing=3),  # None -> int
        sig(missing=torch.zeros(1)),  # None -> tensor
        sig(BLOCK=32),  # constexpr value
        sig(BLOCK=16.0),  # constexpr type (16 == 16.0)
        sig(BLOCK=True, MODE="slow"),
        sig(MODE="fast2"),
    ]
    assert all(c != base for c in changed)
    assert len(set(changed)) == len(changed)
    # Other storage, other offsets, other scalar values: the same signature (they are the flat values).
    same = sig(
        x_ptr=torch.ones(40),
        alias_ptr=torch.ones(50)[10:42],
        n=123,
        scale=-2.0,
        flag=False,
        view=torch.ones(6, dtype=torch.int32),
    )
    assert same == base
    # What cannot be templated: a tensor subclass, an object as a constexpr.
    assert capture_impl(plan, _bound(x_ptr=torch.nn.Parameter(torch.zeros(40))), None) is None
    assert capture_impl(plan, _bound(MODE=object()), None) is None


def test_templates_are_bounded() -> None:
    t = Templates()
    for i in range(LIMIT):
        assert t.add(i, ((), ())) == i + 1
    assert t.add("one more", ((), ())) is None and len(t.numbers) == LIMIT


class StableTritonLike(TritonLike):
    """Returns one compiled-kernel look-alike per kernel and options, as Triton returns its cached kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: dict[Any, Any] = {}

    def __call__(self, jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
        result = super().__call__(jit, args, grid, kwargs)
        return self.kernels.setdefault((id(jit), kwargs.get("num_warps")), result)


def _recording(tmp_path: Path, runner: Any = None) -> tilelens.Recording:
    """A compiled ``snapshots="none"`` recording into ``tmp_path`` through the writer process, templated;
    ``runner``: a ``StableTritonLike`` unless given."""
    return tilelens.Recording(
        str(tmp_path / "h.db"),
        tmp_path / "b",
        backend="compiled",
        snapshots="none",
        runner=StableTritonLike() if runner is None else runner,
    )


def _all_rows(db: Path, blobs: Path) -> list[Any]:
    """Every launch row and its argument rows, every column but ids, times and the run."""
    skip_launch = {"id", "run_id", "kernel_id", "created_at", "started_at", "duration_s"}
    skip_arg = {"id", "launch_id"}
    with History.open(str(db), blobs) as h, h.session() as s:
        out = []
        for launch in s.execute(select(Launch).order_by(Launch.seq)).scalars():
            args = s.execute(
                select(LaunchArg).where(LaunchArg.launch_id == launch.id).order_by(LaunchArg.position)
            ).scalars()
            out.append(
                (
                    {
                        c.name: getattr(launch, c.key)
                        for c in Launch.__table__.columns
                        if c.name not in skip_launch
                    },
                    [
                        {
                            c.name: getattr(a, c.key)
                            for c in LaunchArg.__table__.columns
                            if c.name not in skip_arg
                        }
                        for a in args
                    ],
                )
            )
        return out


def test_the_writer_process_stores_templated_launches_as_the_thread_stores_raw_ones(
    tmp_path: Path, capture_impl: Any
) -> None:
    x = torch.arange(40, dtype=torch.float32)
    rows = {}
    for writer in ("thread", "process"):
        tuned_add.cache.clear()
        tuned_add.cache[(40, "torch.float32", "torch.float32")] = tuned_add.configs[0]
        tuned_add.cache[(24, "torch.float32", "torch.float32")] = tuned_add.configs[1]
        outs = [torch.zeros(40) for _ in range(3)]
        db, blobs = tmp_path / f"{writer}.db", tmp_path / writer
        rec = tilelens.Recording(
            str(db), blobs, backend="compiled", snapshots="none", runner=StableTritonLike(), writer=writer
        )
        with rec:
            for half in range(2):  # the second half after a flush: its template rows are known
                for i in range(6):
                    scale_kernel[(3,)](x, outs[i % 3], 40 - i, float(i), BLOCK=16)
                    scale_kernel[(3,)](x, x, 40, 2 if i % 2 else 2.0, BLOCK=16)  # one storage twice
                    tuned_add[(2,)](x, outs[1], 40 if i % 2 else 24, 0.5 * i)
                    scale_kernel[(1,)](x[i:], outs[2][i:], 8, -1.0, BLOCK=8)  # offsets
                if half == 0:
                    rec.flush()
        kind = type(rec._writer).__name__
        assert kind == ("ProcessWriter" if writer == "process" else "BackgroundWriter")
        if writer == "process":
            assert rec._compiled.native_capture == (capture_impl is not capture)
            # scale_kernel: (tensor, tensor, int, float) at BLOCK 16, its int-factor kind, six shapes at BLOCK 8;
            # tuned_add: two tuning keys
            assert len(rec._compiled._templates.keep) == 10
        assert rec.write_failure is None and len(rec.launch_ids) == 48
        if writer == "process":  # the second half at least came from the template rows the first half left
            assert 24 <= rec._writer.from_templates <= 48 - 10
        rows[writer] = _all_rows(db, blobs)
    assert rows["process"] == rows["thread"]
    launch, args = rows["process"][1]
    assert [a["storage_group"] for a in args if a["kind"] == "tensor"] == [0, 0]
    assert [(a["value"], a["value_type"]) for a in args if a["kind"] == "scalar"] == [
        (40, "int"),
        (2.0, "float"),
    ]
    assert rows["process"][5][1][3]["value"] == 2 and rows["process"][5][1][3]["value_type"] == "int"
    assert [r[1][0]["storage_offset"] for r in rows["process"][3::4]] == list(range(6)) * 2
    assert [r[1][2]["value"] for r in rows["process"][0::4]] == [40 - i for i in range(6)] * 2
    assert {r[0]["tuning_key"] for r in rows["process"][2::4]} == {
        "(24, 'torch.float32', 'torch.float32')",
        "(40, 'torch.float32', 'torch.float32')",
    }


def test_tensors_passed_by_keyword_are_not_kept_and_share_one_template(tmp_path: Path) -> None:
    """Liger's cross entropy passes every argument by keyword: a template key holding the keyword arguments
    kept each launch's tensors alive for the whole recording and missed on every launch."""
    import gc
    import weakref

    x = torch.arange(8, dtype=torch.float32)
    refs = []
    rec = _recording(tmp_path)
    with rec:
        for i in range(5):
            y = torch.zeros(8)
            refs.append(weakref.ref(y))
            scale_kernel[(1,)](x_ptr=x, y_ptr=y, n=8, factor=float(i), BLOCK=8, num_warps=2)
            assert torch.equal(y, x * i)
        del y
        gc.collect()
        assert [r() for r in refs] == [None] * 5  # no launch's tensor outlives it
        assert len(rec._compiled._templates.keep) == 1
        (key,) = rec._compiled._templates.numbers
        # The launch options, not the arguments: their names, then their values (``RoutedKernel.options_key``).
        assert key[2] == (("num_warps",), 2)
    assert rec.write_failure is None and len(rec.launch_ids) == 5
    rows = _all_rows(tmp_path / "h.db", tmp_path / "b")
    assert [r[1][3]["value"] for r in rows] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert {r[0]["config"]["options"]["num_warps"] for r in rows} == {2}


def test_launch_options_split_templates_and_each_launch_keeps_its_own(tmp_path: Path) -> None:
    """The template key holds the launch options by names and values (``RoutedKernel.options_key``): other values
    make another template, and every launch is stored with the options it was launched with."""
    x = torch.arange(8, dtype=torch.float32)
    rec = _recording(tmp_path)
    with rec:
        for warps in (2, 4, 2, 4):
            scale_kernel[(1,)](x, torch.zeros(8), 8, 1.0, BLOCK=8, num_warps=warps)
        # Named in another order: the constexpr is an argument, not an option, so the same template.
        scale_kernel[(1,)](x, torch.zeros(8), 8, 1.0, num_warps=4, BLOCK=8)
        keys = list(rec._compiled._templates.numbers)
        assert [key[2] for key in keys] == [(("num_warps",), 2), (("num_warps",), 4)]
    rows = _all_rows(tmp_path / "h.db", tmp_path / "b")
    assert [r[0]["config"]["options"] for r in rows] == [{"num_warps": w} for w in (2, 4, 2, 4, 4)]
    assert [r[0]["config"]["constexprs"] for r in rows] == [{"BLOCK": 8}] * 5


def test_tunings_in_a_templated_recording_keep_their_keys_and_events(tmp_path: Path) -> None:
    """A positional tuned call's key is worked out only when a launch needs its text (``_key_later``): each
    launch still gets its own key, each fresh tuning its event, linked to the launch it made."""

    def bench(kernel_call: Any, quantiles: Any = None) -> list[float]:
        kernel_call()
        return [1.0, 1.0, 1.0]

    with knobs.runtime.scope():
        knobs.runtime.interpret = False

        @triton.autotune(
            configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"], do_bench=bench
        )
        @triton.jit
        def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    x = torch.arange(64, dtype=torch.float32)
    rec = _recording(tmp_path)
    ns = [64, 32, 64, 32, 48]
    with rec:
        for n in ns:
            tuned[(2,)](x, torch.zeros(64), n)
        assert len(rec._compiled._templates.keep) == 3  # one per tuning key
    assert rec.write_failure is None and len(rec.launch_ids) == 5
    with History.open(str(tmp_path / "h.db"), tmp_path / "b") as h, h.session() as s:
        launches = s.execute(select(Launch).order_by(Launch.seq)).scalars().all()
        assert [launch.tuning_key for launch in launches] == [
            f"({n}, 'torch.float32', 'torch.float32')" for n in ns
        ]
        events = s.execute(select(AutotuneEventRow).order_by(AutotuneEventRow.id)).scalars().all()
        assert [e.tuning_key for e in events] == [
            f"({n}, 'torch.float32', 'torch.float32')" for n in (64, 32, 48)
        ]
        assert [e.launch_id for e in events] == [launches[i].id for i in (0, 1, 4)]
        assert all(e.timings == [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]] for e in events)


class AlignedTritonLike(StableTritonLike):
    """Also one compiled kernel per alignment of the output pointer, as Triton specializes pointers."""

    def __call__(self, jit: Any, args: tuple[Any, ...], grid: Any, kwargs: dict[str, Any]) -> Any:
        result = super().__call__(jit, args, grid, kwargs)
        key = ("aligned", id(jit), kwargs.get("num_warps"), args[1].data_ptr() % 16 == 0)
        return self.kernels.setdefault(key, copy.copy(result))


class _Writer:
    """Takes what the router queues for the writer process: template definitions and flat launches."""

    def __init__(self) -> None:
        self.templates: list[int] = []
        self.launches: list[tuple[int, list[Any]]] = []

    def submit_template(self, kernel: Any, template: int, body: Any) -> None:
        self.templates.append(template)

    def submit_flat(self, template: int, started: float, duration: float, grid: Any, values: Any) -> int:
        self.launches.append((template, values))
        return len(self.launches)


def test_a_launch_like_the_kernels_last_takes_its_template_and_a_new_writer_starts_over(
    monkeypatch: pytest.MonkeyPatch, capture_impl: Any
) -> None:
    """``RoutedKernel.last_template`` answers a launch like the kernel's last one without the hashed lookup; any
    difference (another shape, a scalar's type, the options) goes through the key, and templates numbered for
    another writer are never reused."""
    router = CompiledRouter(sink=None, policy=SnapshotPolicy(mode="none"), runner=AlignedTritonLike())
    first = _Writer()
    router.use_templates(first)
    assert router._capture is capture_impl
    x, y = torch.arange(8, dtype=torch.float32), torch.zeros(8)
    wide, base = torch.zeros(16), torch.zeros(16)

    def launch(out: torch.Tensor, factor: Any, **options: Any) -> None:
        router.launch(
            scale_kernel, (x, out, 8, factor), {"grid": (1,), "warmup": False, "BLOCK": 8, **options}
        )

    launch(y, 1.0)  # template 1
    launch(y, 2.0)  # the same kind: 1, by the last-template check
    launch(wide, 2.0)  # another shape: 2
    launch(y, 3.0)  # 1 again, through the key (the last one was 2)
    launch(y, 4.0, num_stages=2)  # only the options differ from the last (same compiled kernel): 3
    launch(y, 5.0, num_stages=2)  # 3, by the check
    launch(y, 5)  # an int factor: 4
    launch(y, 6.0)  # 1
    launch(
        base[1:9], 6.0
    )  # y's kind, but a pointer Triton would not call aligned: another compiled kernel, 5
    launch(base[1:9], 6.5)  # 5, by the check
    monkeypatch.setattr(session, "nodeid", "tests/test_x.py::test_one")  # under the pytest plugin
    launch(base[1:9], 6.5)  # another test's launch: 6
    assert [n for n, _ in first.launches] == [1, 1, 2, 1, 3, 3, 4, 1, 5, 5, 6]
    assert first.templates == [1, 2, 3, 4, 5, 6]
    assert [v[-1] for _, v in first.launches] == [1.0, 2.0, 2.0, 3.0, 4.0, 5.0, 5, 6.0, 6.0, 6.5, 6.5]
    second = _Writer()
    router.use_templates(second)
    launch(y, 7.0)  # like the last launch, but the new writer knows no template yet: its own template 1
    assert second.templates == [1] and second.launches == [(1, second.launches[0][1])]
    assert second.launches[0][1][-1] == 7.0
    assert len(first.launches) == 11
