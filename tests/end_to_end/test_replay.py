"""Replay: recorded launches re-run on the CPU bit for bit (outputs and access traces) and on CUDA within
tolerances; changed kernels, broken blobs, failing launches and missing GPUs each give one clear answer."""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from sqlalchemy import func, select
from triton import knobs

import tilelens
from tests import kernels
from tests.conftest import BACKENDS, new_history_url
from tilelens.cli import main
from tilelens.replay import replay_launch, select_launches
from tilelens.replay.rebuild import rebuild_arguments
from tilelens.store import History
from tilelens.store.read.launches import load_launch
from tilelens.store.sql.models import Launch, LaunchArg, Replay, Run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(
    not HAS_CUDA, reason="no CUDA device here (torch.cuda.is_available() is False)"
)

with knobs.runtime.scope():
    knobs.runtime.interpret = False

    @triton.jit
    def alias_kernel(src_ptr, dst_ptr, bits_ptr, n, BLOCK: tl.constexpr):
        # dst overlaps src, so a program reads what earlier programs wrote: only a faithful rebuild matches.
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(src_ptr + offs, mask=mask)
        tl.store(dst_ptr + offs, x * 2.0 + 1.0, mask=mask)
        tl.store(bits_ptr + offs, x.to(tl.int32, bitcast=True), mask=offs < BLOCK)

    @triton.jit
    def failing_kernel(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)  # BLOCK=3 is not a power of two: fails in every program
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)


BUMP = '''"""A kernel defined in a script, as users write them."""
import torch
import triton
import triton.language as tl


@triton.jit
def bump_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 2.0, mask=mask)


if __name__ == "__main__":
    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty(100)
    bump_kernel[(4,)](x, out, 100, BLOCK=32)
'''


def _where(path: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    """A new history on the backend the test runs on (``request.param``: sqlite or postgresql)."""
    return {"db": new_history_url(request.param, path, request), "blobs": str(path / "blobs")}


def _cli(capsys: pytest.CaptureFixture[str], where: dict[str, str], *argv: str) -> tuple[int, str, str]:
    code = main(["--db", where["db"], "--blobs", where["blobs"], *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _replays(where: dict[str, str]) -> list[Replay]:
    with History.open(**where) as h, h.session() as s:
        return list(s.scalars(select(Replay).order_by(Replay.id)))


@pytest.fixture(scope="module", params=BACKENDS)
def examples(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, str]:
    """Every example recorded once per worker, the way `tilelens record examples/run_all.py` would."""
    where = _where(tmp_path_factory.mktemp("examples"), request)
    sys.path.insert(0, str(EXAMPLES))
    try:
        with tilelens.record(**where):
            runpy.run_path(str(EXAMPLES / "run_all.py"), run_name="__main__")
    finally:
        sys.path.remove(str(EXAMPLES))
    return where


@pytest.fixture
def where(history_url: str, tmp_path: Path) -> dict[str, str]:
    """A new history on each backend (the suite's one parametrized ``history_url``)."""
    return {"db": history_url, "blobs": str(tmp_path / "history" / "blobs")}


@pytest.fixture(params=BACKENDS)
def bump(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[dict[str, str], Path, int]:
    """A script kernel recorded from its file (module "__main__"), so replay must load that file."""
    script = tmp_path / "bump.py"
    script.write_text(BUMP)
    where = _where(tmp_path, request)
    with tilelens.record(**where) as rec:
        runpy.run_path(str(script), run_name="__main__")
    return where, script, rec.launch_ids[0]


# -- every example, bit for bit ------------------------------------------------------------------------------


def test_every_example_replays_bit_for_bit_on_cpu(examples: dict[str, str]) -> None:
    with History.open(**examples) as h:
        ids = select_launches(h, run_id=1)
        results = [replay_launch(h, i) for i in ids]
    kernels_seen = {r.kernel.rsplit(".", 1)[-1] for r in results}
    assert kernels_seen == {"add_kernel", "softmax_kernel", "matmul_kernel", "scale_kernel", "shift_kernel"}
    for r in results:
        assert r.outcome == "match", r.message
        assert r.exit_code == 0 and r.trace_equal is True and r.backend == "interpreter"
        assert all(d.equal and d.max_abs_err == 0 for d in r.tensors)
        assert r.record_s is not None and r.run_s is not None and r.duration_s >= r.run_s
    stored = _replays(examples)[-len(results) :]
    assert [s.outcome for s in stored] == ["match"] * len(results)
    assert all(s.trace_equal and s.device == "cpu" and s.backend == "interpreter" for s in stored)


def test_autotuned_and_heuristic_launches_use_the_recorded_config(examples: dict[str, str]) -> None:
    with History.open(**examples) as h:
        (matmul,) = select_launches(h, kernel="matmul_kernel")
        scale = select_launches(h, kernel="heuristics_scale.scale_kernel")
        spec = load_launch(h, matmul)
        assert spec.config["autotune"]["chosen"]["kwargs"] == spec.constexprs
        assert [replay_launch(h, i).outcome for i in [matmul, *scale]] == ["match"] * 3
    assert (
        len(scale) == 2
    )  # one even, one ragged size: two different heuristic choices, both replayed as recorded


def test_cli_batch_in_a_fresh_process_loads_kernels_from_their_recorded_files(
    examples: dict[str, str], tmp_path: Path
) -> None:
    # The examples folder is not importable from here: replay must load each recorded file itself.
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "tilelens.cli", "--db", examples["db"], "--blobs", examples["blobs"]]
    proc = subprocess.run(
        [*cmd, "replay", "--run", "1", "--json"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # the progress bar went to stderr, stdout is pure JSON
    assert data["summary"] == {"match": 6, "mismatch": 0, "error": 0, "unknown-read": 0}
    assert all(r["trace_equal"] for r in data["results"])
    table = subprocess.run(
        [*cmd, "replay", "--kernel", "softmax_kernel"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert table.returncode == 0, table.stderr
    assert (
        "softmax.softmax_kernel" in table.stdout
        and "1 replayed: 1 match, 0 mismatch, 0 error" in table.stdout
    )


def test_cli_single_launch_and_unknown_id(
    examples: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, examples, "replay", "1")
    assert code == 0 and out.startswith("match: launch 1 (vector_add.add_kernel) on cpu")
    before = len(_replays(examples))
    code, out, err = _cli(capsys, examples, "replay", "999")
    assert code == 2 and out == ""
    assert (
        err.strip().startswith("tilelens: error: no launch 999 in history")
        and len(err.strip().splitlines()) == 1
    )
    assert len(_replays(examples)) == before  # an unknown launch gets no replay row
    code, _, err = _cli(capsys, examples, "replay", "1", "--run", "1")
    assert code == 2 and "--run" in err
    code, _, err = _cli(capsys, examples, "replay", "--run", "42")
    assert code == 2 and "no launches of run 42" in err
    code, _, err = _cli(capsys, examples, "replay", "--run", "1", "--last")
    assert code == 2 and "--last" in err


def test_cli_last_replays_the_newest_run(
    examples: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, examples, "replay", "--last", "--json")
    report = json.loads(out)
    results = report["results"]
    with History.open(**examples) as h, h.session() as s:
        newest = s.scalar(select(func.max(Run.id)))
        expected = s.scalars(
            select(Launch.id).where(Launch.run_id == newest, Launch.role == "launch").order_by(Launch.id)
        ).all()
    assert code == 0 and [r["launch_id"] for r in results] == expected and len(expected) > 0
    assert report["summary"] == {"match": len(expected), "mismatch": 0, "error": 0, "unknown-read": 0}


# -- changed kernels -----------------------------------------------------------------------------------------


def test_changed_kernel_is_refused(
    bump: tuple[dict[str, str], Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    where, script, launch = bump
    script.write_text(BUMP.replace("x * 2.0", "x * 3.0"))
    code, out, err = _cli(capsys, where, "replay", str(launch))
    assert code == 2 and out == ""
    assert "source changed" in err and "--allow-changed" in err and len(err.strip().splitlines()) == 1
    (row,) = _replays(where)
    assert row.outcome == "error" and "source changed" in (row.message or "")
    assert "--" not in (row.message or "")  # the CLI adds the flags; the history keeps the neutral message
    with History.open(**where) as h:
        r = replay_launch(h, launch, store=False)
    assert r.refusal == "source-changed" and r.message == row.message


def test_changed_kernel_with_allow_changed_is_a_mismatch_at_the_edited_store(
    bump: tuple[dict[str, str], Path, int],
) -> None:
    where, script, launch = bump
    edited = BUMP.replace("x * 2.0", "x * 3.0")
    script.write_text(edited)
    with History.open(**where) as h:
        r = replay_launch(h, launch, allow_changed=True)
    assert r.outcome == "mismatch" and r.exit_code == 1
    assert r.source_changed and r.message.startswith("source changed")
    assert r.trace_equal is True  # same accesses, different values
    (out,) = [d for d in r.tensors if not d.equal]
    assert out.name == "out_ptr" and out.mismatched == 99  # out[0] = 0 * 3.0 = 0 * 2.0
    assert out.first_index == "[1]" and out.first_recorded == 2.0 and out.first_replayed == 3.0
    assert out.written_by is not None and out.written_by.op == "store"
    assert out.written_by.line == _line(edited, "tl.store") and out.written_by.program == (0, 0, 0)


def test_changed_access_is_reported_at_its_event_and_line(
    bump: tuple[dict[str, str], Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    where, script, launch = bump
    edited = BUMP.replace("tl.load(x_ptr + offs,", "tl.load(x_ptr + offs + 1,")
    script.write_text(edited)
    code, out, _ = _cli(capsys, where, "replay", str(launch), "--allow-changed")
    assert code == 1 and out.startswith("mismatch: source changed")
    with History.open(**where) as h:
        r = replay_launch(h, launch, allow_changed=True)
    d = r.trace_diff
    assert d is not None and r.trace_equal is False
    assert (d.program, d.event, d.op, d.arg) == ((0, 0, 0), 0, "load", "x_ptr")
    assert d.line == _line(edited, "tl.load") and d.field.startswith("base")
    assert (d.recorded, d.replayed) == (0, 1)
    assert f"at line {d.line}" in out and "base recorded 0, replayed 1" in out


def test_from_history_runs_the_recorded_source(
    bump: tuple[dict[str, str], Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    where, script, launch = bump
    script.write_text(BUMP.replace("x * 2.0", "x * 3.0"))
    with History.open(**where) as h:
        with pytest.raises(ValueError, match="trust_source"):
            replay_launch(h, launch, from_history=True)
        r = replay_launch(h, launch, from_history=True, trust_source=True)
    assert r.outcome == "match", r.message
    assert r.trace_equal and not r.source_changed and r.from_history
    code, _, err = _cli(capsys, where, "replay", str(launch), "--from-history")
    assert code == 2 and "--trust-source" in err


def test_kernel_that_cannot_be_found_is_an_error(bump: tuple[dict[str, str], Path, int]) -> None:
    where, script, launch = bump
    script.unlink()
    with History.open(**where) as h:
        r = replay_launch(h, launch)
    assert r.outcome == "error" and r.message.startswith("cannot find kernel __main__.bump_kernel")
    assert "does not exist" in r.message


# -- broken inputs -------------------------------------------------------------------------------------------


def _out_before_blob(where: dict[str, str], launch: int) -> str:
    with History.open(**where) as h, h.session() as s:
        arg = s.scalars(
            select(LaunchArg).where(LaunchArg.launch_id == launch, LaunchArg.name == "out_ptr")
        ).one()
        return arg.before_blob


def _counts(where: dict[str, str]) -> dict[str, int]:
    with History.open(**where) as h:
        return h.counts()


def test_corrupted_blob_names_the_blob_and_the_launch(
    bump: tuple[dict[str, str], Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    where, _, launch = bump
    sha = _out_before_blob(where, launch)
    path = Path(where["blobs"]) / sha[:2] / sha
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    before = _counts(where)
    code, out, err = _cli(capsys, where, "replay", str(launch))
    assert code == 2 and out == ""
    assert f"launch {launch}" in err and "out_ptr" in err and f"blob {sha} is corrupt" in err
    after = _counts(where)
    assert after.pop("replays") == before.pop("replays") + 1 and after == before  # only the replay row
    (row,) = _replays(where)
    assert row.outcome == "error" and sha in (row.message or "")


def test_recording_a_tensor_again_repairs_its_corrupt_blob_and_replays_match(
    bump: tuple[dict[str, str], Path, int],
) -> None:
    where, script, first = bump
    with History.open(**where) as h:
        sha = _arg_blob(h, first, "x_ptr")
    path = Path(where["blobs"]) / sha[:2] / sha
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # same name, same size
    path.write_bytes(bytes(data))
    with tilelens.record(**where) as rec:  # a new History and blob store, as in a new process
        runpy.run_path(str(script), run_name="__main__")
    (second,) = rec.launch_ids
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    with History.open(**where) as h:
        results = [replay_launch(h, launch) for launch in (first, second)]
        assert _arg_blob(h, second, "x_ptr") == sha
    assert [r.outcome for r in results] == ["match", "match"], [r.message for r in results]


def _arg_blob(h: History, launch: int, name: str) -> str:
    with h.session() as s:
        return s.scalars(
            select(LaunchArg.before_blob).where(LaunchArg.launch_id == launch, LaunchArg.name == name)
        ).one()


def test_missing_blob_names_the_blob_and_the_launch(bump: tuple[dict[str, str], Path, int]) -> None:
    where, _, launch = bump
    sha = _out_before_blob(where, launch)
    (Path(where["blobs"]) / sha[:2] / sha).unlink()
    with History.open(**where) as h:
        r = replay_launch(h, launch)
    assert r.outcome == "error" and r.exit_code == 2
    assert f"launch {launch}: argument out_ptr (before snapshot): blob {sha} is missing" in r.message


def test_launch_recorded_failing_reproduces_the_same_error(
    where: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    x = torch.zeros(4)
    with tilelens.record(**where) as rec, pytest.raises(Exception, match="power of 2"):
        failing_kernel[(1,)](x, BLOCK=3)
    (launch,) = rec.launch_ids
    with History.open(**where) as h:
        r = replay_launch(h, launch)
    assert r.outcome == "error" and r.exit_code == 2
    assert (
        r.same_error is True
        and r.recorded_error == r.replay_error
        and "power of 2" in (r.recorded_error or "")
    )
    assert "was recorded failing" in r.message and "the same error" in r.message
    code, _, err = _cli(capsys, where, "replay", str(launch))
    assert code == 2 and "failed with the same error" in err


def test_cuda_where_there_is_no_gpu_is_one_clear_error_and_stores_nothing(
    bump: tuple[dict[str, str], Path, int],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    where, _, launch = bump
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, err = _cli(capsys, where, "replay", str(launch), "--device", "cuda")
    assert code == 2 and out == ""
    assert err.strip() == (
        "tilelens: error: cuda requested but no CUDA device is available here (torch.cuda.is_available() is False)"
    )
    code, _, err = _cli(capsys, where, "replay", str(launch), "--device", "tpu")
    assert (code, err) == (2, "tilelens: error: unknown device 'tpu'; use cpu or cuda[:N]\n")
    code, _, err = _cli(capsys, where, "replay", "--last", "--device", "cuda:x")
    assert code == 2 and "unknown device 'cuda:x'" in err
    assert _replays(where) == []  # a replay that never started stores nothing


# -- aliasing and tolerances ---------------------------------------------------------------------------------


def test_views_of_one_storage_share_it_again(where: dict[str, str]) -> None:
    buf = torch.arange(96, dtype=torch.float32)
    src, dst, bits = buf[0:32], buf[8:72:2], buf.view(torch.int32)[80:88]
    src_before = src.clone()
    with tilelens.record(**where) as rec:
        alias_kernel[(4,)](src, dst, bits, 32, BLOCK=8)
    (launch,) = rec.launch_ids
    assert not torch.equal(dst, src_before * 2.0 + 1.0)  # programs did read each other's writes
    with History.open(**where) as h:
        spec = load_launch(h, launch)
        rebuilt = rebuild_arguments(h.blobs, spec, torch.device("cpu"))
        views = {t.spec.name: t.view for t in rebuilt.tensors}
        assert len({v.untyped_storage().data_ptr() for v in views.values()}) == 1
        for name, original in (("src_ptr", src), ("dst_ptr", dst), ("bits_ptr", bits)):
            v = views[name]
            assert (v.dtype, v.shape, v.stride(), v.storage_offset()) == (
                original.dtype,
                original.shape,
                original.stride(),
                original.storage_offset(),
            )
        assert torch.equal(views["src_ptr"], src_before)
        r = replay_launch(h, launch)
    assert r.outcome == "match", r.message
    assert r.trace_equal and {d.name for d in r.tensors} == {"src_ptr", "dst_ptr", "bits_ptr"}


def test_tolerances_relax_a_cpu_comparison(bump: tuple[dict[str, str], Path, int]) -> None:
    where, script, launch = bump
    script.write_text(BUMP.replace("x * 2.0", "x * 2.000001"))
    with History.open(**where) as h:
        exact = replay_launch(h, launch, allow_changed=True)
        loose = replay_launch(h, launch, allow_changed=True, rtol=1e-6)
    assert exact.outcome == "mismatch" and exact.max_rel_err is not None and 0 < exact.max_rel_err < 1e-6
    assert loose.outcome == "match" and "within tolerance" in loose.message
    assert loose.tensors[1].rtol == 1e-6


# -- CUDA ----------------------------------------------------------------------------------------------------


@needs_cuda
def test_cuda_replays_of_examples_match_within_tolerance(examples: dict[str, str]) -> None:
    with History.open(**examples) as h:
        results = [replay_launch(h, i, device="cuda") for i in select_launches(h, run_id=1)]
    for r in results:
        assert r.outcome == "match", r.message
        assert r.backend == "compiled" and r.device == "cuda:0" and r.trace_equal is None
        assert r.max_abs_err is not None


@needs_cuda
def test_cuda_tf32_matmul_is_judged_with_tf32_tolerance(where: dict[str, str]) -> None:
    torch.manual_seed(0)
    a, b, c = torch.randn(128, 128), torch.randn(128, 128), torch.empty(128, 128)
    with tilelens.record(**where) as rec:
        kernels.matmul_kernel[(4, 4)](a, b, c, 128, 128, 128, BM=32, BN=32, BK=32)
    with History.open(**where) as h:
        loose = replay_launch(h, rec.launch_ids[0], device="cuda")
        strict = replay_launch(h, rec.launch_ids[0], device="cuda", atol=1e-6, rtol=1e-6)
    assert loose.outcome == "match", loose.message
    assert loose.tensors[2].atol is not None and loose.tensors[2].atol >= 1e-2
    assert strict.outcome == "mismatch" and strict.max_abs_err and strict.max_abs_err > 1e-6


@needs_cuda
def test_cuda_compiles_the_recorded_source_with_from_history(bump: tuple[dict[str, str], Path, int]) -> None:
    where, script, launch = bump
    script.write_text(BUMP.replace("x * 2.0", "x * 3.0"))
    with History.open(**where) as h:
        changed = replay_launch(h, launch, device="cuda", allow_changed=True)
        recorded = replay_launch(h, launch, device="cuda", from_history=True, trust_source=True)
    assert changed.outcome == "mismatch" and changed.source_changed
    assert recorded.outcome == "match", recorded.message
    assert recorded.message.startswith("recorded source; launch")


def test_replay_rows_carry_outcome_device_and_time(examples: dict[str, str]) -> None:
    with History.open(**examples) as h:
        r = replay_launch(h, 2)
        with h.session() as s:
            row = s.get(Replay, r.replay_id)
            assert row is not None and row.launch_id == 2 and row.outcome == "match"
            assert row.duration_s == pytest.approx(r.duration_s) and row.versions and "triton" in row.versions
            assert s.scalar(select(func.count()).select_from(Launch)) == 6
        no_row = replay_launch(h, 2, store=False)
    assert no_row.replay_id is None and no_row.outcome == "match"
