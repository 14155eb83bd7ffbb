"""Sparse snapshots: a launch touching 64 elements of a large tensor stores those elements, before and after,
not the tensor; replay rebuilds it and says when an edited kernel reads an element the record does not hold; a
launch touching the whole tensor keeps today's whole-span blob (the same content address)."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest
import torch
from sqlalchemy import select

import tilelens
from tests.conftest import new_history_url
from tests.sparse_kernels import atomic_kernel, kv_read_kernel, kv_update_kernel, scale_all_kernel
from tilelens.cli import main
from tilelens.config import Location
from tilelens.core.interpreted import touched
from tilelens.errors import TensorCodecError
from tilelens.replay import replay_launch
from tilelens.store import BlobStore, History
from tilelens.store.files.sparse import SparseSnapshot, sparse_to_table, table_to_sparse
from tilelens.store.files.tensors import table_to_tensor
from tilelens.store.sql.models import Blob, LaunchArg, Replay

CACHE = 1 << 20  # 4 MiB of float32: above touched.WHOLE_BELOW, so deferred
POS = 1000


def _where(location: Location) -> dict[str, str]:
    return {"db": location.url, "blobs": str(location.blobs_dir)}


def _args(h: History, launch_id: int) -> dict[str, LaunchArg]:
    with h.session() as s:
        rows = s.scalars(select(LaunchArg).where(LaunchArg.launch_id == launch_id))
        return {a.name: a for a in rows}


def _blob_bytes(h: History, shas: set[str]) -> int:
    with h.session() as s:
        return sum(s.scalars(select(Blob.size).where(Blob.sha256.in_(shas))))


def _record_update(location: Location) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    cache = torch.randn(CACHE, generator=gen)
    original = cache.clone()
    new = torch.randn(64, generator=gen)
    with tilelens.record(**_where(location)) as rec:
        kv_update_kernel[(1,)](cache, new, POS, BLOCK=64)
    return rec.launch_ids[0], cache, original, new


def test_a_64_element_update_stores_exactly_those_elements(history_location: Location) -> None:
    launch, cache, original, new = _record_update(history_location)
    expected = original[POS : POS + 64] * 0.5 + new
    assert torch.equal(cache[POS : POS + 64], expected)  # the kernel computed what it computes untraced
    assert torch.equal(cache[:POS], original[:POS]) and torch.equal(cache[POS + 64 :], original[POS + 64 :])
    with History.open(location=history_location) as h:
        args = _args(h, launch)
        arg = args["cache_ptr"]
        assert arg.snapshot_elements == 64 and arg.changed
        before, after = h.blobs.get_snapshot(arg.before_blob), h.blobs.get_snapshot(arg.after_blob)
        for snap in (before, after):
            assert isinstance(snap, SparseSnapshot)
            assert snap.span == CACHE and snap.shape == (CACHE,) and snap.strides == (1,)
            assert snap.dtype == torch.float32 and snap.storage_offset == 0
            assert np.array_equal(snap.index, np.arange(POS, POS + 64))
        assert torch.equal(before.values, original[POS : POS + 64])  # bit for bit, from the write log
        assert torch.equal(after.values, expected)
        # The small argument keeps its whole snapshot, as before.
        assert args["new_ptr"].snapshot_elements is None
        assert torch.equal(h.blobs.get_snapshot(args["new_ptr"].before_blob), new)
        shas = {a.before_blob for a in args.values() if a.before_blob} | {
            a.after_blob for a in args.values() if a.after_blob
        }
        assert _blob_bytes(h, shas) < 8 * 1024  # two 64-element snapshots and a 64-float input
        # A whole blob is a tensor; a sparse one says what it is instead of decoding as one.
        with pytest.raises(TensorCodecError, match="sparse snapshot"):
            h.blobs.get_tensor(arg.before_blob)


def test_the_replay_of_a_sparse_launch_matches_bit_for_bit(history_location: Location) -> None:
    launch, *_ = _record_update(history_location)
    with History.open(location=history_location) as h:
        r = replay_launch(h, launch)
        assert r.outcome == "match", r.message
        assert r.trace_equal is True and r.exit_code == 0
        (cache,) = [d for d in r.tensors if d.name == "cache_ptr"]
        assert cache.sparse and cache.equal and cache.elements == CACHE


def test_before_values_survive_many_writes_to_one_element(history_location: Location) -> None:
    """Atomics of 8 programs on the same elements: the before-value is what the first write found."""
    cache = torch.arange(CACHE, dtype=torch.float32)
    with tilelens.record(**_where(history_location)) as rec:
        atomic_kernel[(8,)](cache, 7)
    assert cache[7].item() == 7 + 8 and cache[8].item() == 8 + 16
    with History.open(location=history_location) as h:
        arg = _args(h, rec.launch_ids[0])["x_ptr"]
        before, after = h.blobs.get_snapshot(arg.before_blob), h.blobs.get_snapshot(arg.after_blob)
        assert np.array_equal(before.index, [7, 8])
        assert before.values.tolist() == [7.0, 8.0] and after.values.tolist() == [15.0, 24.0]
        assert replay_launch(h, rec.launch_ids[0]).outcome == "match"


def test_reading_launch_stores_one_snapshot_and_repeats_are_stored_once(history_location: Location) -> None:
    cache = torch.randn(CACHE, generator=torch.Generator().manual_seed(1))
    out = torch.empty(64)
    with tilelens.record(**_where(history_location)) as rec:
        kv_read_kernel[(1,)](cache, out, 4096, BLOCK=64)
        kv_read_kernel[(1,)](cache, out, 4096, BLOCK=64)
    assert torch.equal(out, cache[4096 : 4096 + 64] + 1.0)
    with History.open(location=history_location) as h:
        first, second = (_args(h, i)["cache_ptr"] for i in rec.launch_ids)
        assert first.snapshot_elements == 64 and not first.changed and first.after_blob == first.before_blob
        assert second.before_blob == first.before_blob  # identical snapshots: one blob
        snap = h.blobs.get_snapshot(first.before_blob)
        assert np.array_equal(snap.index, np.arange(4096, 4096 + 64))
        assert torch.equal(snap.values, cache[4096 : 4096 + 64])


def test_a_kernel_touching_the_whole_tensor_keeps_the_whole_blob(
    history_location: Location, tmp_path: Path
) -> None:
    x = torch.randn(1 << 19, generator=torch.Generator().manual_seed(2))  # 2 MiB: deferred, then whole
    original = x.clone()
    half = torch.randn(1 << 19, generator=torch.Generator().manual_seed(3))
    half_original = half.clone()
    with tilelens.record(**_where(history_location)) as rec:
        scale_all_kernel[(x.numel() // 1024,)](x, x.numel(), BLOCK=1024)
        # Half of it: the trace is decoded, and a half-touched tensor is still cheaper whole.
        scale_all_kernel[(half.numel() // 2048,)](half, half.numel() // 2, BLOCK=1024)
    assert torch.equal(x, original * 2.0)
    # The content address a copy taken before the launch gets (what every earlier version stored).
    today = BlobStore(tmp_path / "reference")
    with History.open(location=history_location) as h:
        whole, halfway = (_args(h, i)["x_ptr"] for i in rec.launch_ids)
        for arg, before, after in ((whole, original, x), (halfway, half_original, half)):
            assert arg.snapshot_elements is None
            assert arg.before_blob == today.store_tensor(before.clone()).sha256
            assert arg.after_blob == today.store_tensor(after.clone()).sha256
        assert replay_launch(h, rec.launch_ids[1]).outcome == "match"


EDITABLE = '''"""A KV-cache kernel in a script, to be edited after it was recorded."""
import torch
import triton
import triton.language as tl


@triton.jit
def update_kernel(cache_ptr, new_ptr, pos, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.load(cache_ptr + pos + offs)
    tl.store(cache_ptr + pos + offs, old + tl.load(new_ptr + offs))


if __name__ == "__main__":
    cache = torch.ones(1 << 20)
    update_kernel[(1,)](cache, torch.full((64,), 2.0), 1000, BLOCK=64)
'''


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_an_edited_kernel_reading_an_untouched_element_is_told_apart(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "kv.py"
    script.write_text(EDITABLE)
    where = {"db": new_history_url(backend, tmp_path, request), "blobs": str(tmp_path / "blobs")}
    with tilelens.record(**where) as rec:
        runpy.run_path(str(script), run_name="__main__")
    launch = rec.launch_ids[0]
    script.write_text(EDITABLE.replace("cache_ptr + pos + offs)\n", "cache_ptr + pos + offs + 36)\n", 1))
    with History.open(**where) as h:
        r = replay_launch(h, launch, allow_changed=True)
        assert r.outcome == "unknown-read" and r.exit_code == 3
        assert r.unknown_reads == [
            "cache_ptr: read span element 1064 (and 35 more), which the record does not hold"
        ]
        assert "sparse snapshot does not hold" in r.message and r.message.startswith("source changed")
        with h.session() as s:
            assert s.scalars(select(Replay.outcome)).all() == ["unknown-read"]
    code = main(["--db", where["db"], "--blobs", where["blobs"], "replay", str(launch), "--allow-changed"])
    out = capsys.readouterr().out
    assert code == 3 and "unknown-read" in out and "span element 1064" in out


def test_show_export_and_diff_of_sparse_launches(
    history_location: Location, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = _where(history_location)
    cache = torch.zeros(CACHE)
    with tilelens.record(**where) as rec:
        kv_update_kernel[(1,)](cache, torch.ones(64), POS, BLOCK=64)
        kv_update_kernel[(1,)](cache, torch.full((64,), 3.0), POS, BLOCK=64)
    a, b = rec.launch_ids
    cli = ["--db", where["db"], "--blobs", where["blobs"]]
    assert main([*cli, "show", str(a)]) == 0
    out = capsys.readouterr().out
    assert "written, snapshot of the 64 touched elements only" in out
    assert main([*cli, "export", str(a), "-o", str(tmp_path / "lanes.parquet")]) == 0
    assert "wrote 192 lanes" in capsys.readouterr().err
    main([*cli, "diff", str(a), str(b)])
    out = capsys.readouterr().out
    # After a: 0.5*0 + 1 = 1; after b: 0.5*1 + 3 = 3.5, on the 64 elements both recorded.
    assert "cache_ptr: 64 of 64 elements differ; first [1000]: 1.0 -> 3.5" in out
    assert "compared the 64 span elements both launches recorded" in out


def test_sparse_codec_round_trips_and_refuses_bad_indices() -> None:
    snap = SparseSnapshot(
        torch.bfloat16,
        (4, 8),
        (16, 1),
        3,
        56,
        np.array([0, 5, 55]),
        torch.tensor([1.5, -0.0, 2.0]).bfloat16(),
    )
    back = table_to_sparse(sparse_to_table(snap))
    assert (back.dtype, back.shape, back.strides, back.storage_offset, back.span) == (
        torch.bfloat16,
        (4, 8),
        (16, 1),
        3,
        56,
    )
    assert np.array_equal(back.index, [0, 5, 55])
    assert back.values.view(torch.int16).tolist() == snap.values.view(torch.int16).tolist()  # -0.0 kept
    dense = back.dense()
    assert (
        dense.numel() == 56 and dense[5].view(torch.int16).item() == snap.values[1].view(torch.int16).item()
    )
    with pytest.raises(TensorCodecError, match="sparse snapshot"):
        table_to_tensor(sparse_to_table(snap))
    snap.index = np.array([5, 0, 55])
    with pytest.raises(TensorCodecError, match="sorted"):
        table_to_sparse(sparse_to_table(snap))


def test_only_large_spans_are_deferred() -> None:
    assert not touched.defer(torch.empty(touched.WHOLE_BELOW // 4))
    assert touched.defer(torch.empty(touched.WHOLE_BELOW // 4 + 1))
    assert touched.sparse_wins(64, CACHE, 4) and not touched.sparse_wins(CACHE // 2, CACHE, 4)


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device here (torch.cuda.is_available() is False)"
)
def test_a_cuda_replay_of_a_sparse_launch_matches_and_says_what_it_cannot_check(
    history_location: Location,
) -> None:
    launch, cache, original, new = _record_update(history_location)
    with History.open(location=history_location) as h:
        r = replay_launch(h, launch, device="cuda")
    assert r.outcome == "match", r.message
    (arg,) = [d for d in r.tensors if d.name == "cache_ptr"]
    assert arg.sparse and arg.equal and arg.elements == CACHE
    assert "elements the recorded launch did not touch were rebuilt as zeros" in r.message
