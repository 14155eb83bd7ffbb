"""Tensor arguments a launch never accesses (placeholders such as Liger's ``torch.empty(1)`` label) keep an empty
sparse snapshot: the same blob every launch whatever the placeholder held, a replay that matches, and an edited
kernel that reads the placeholder told apart (unknown-read). Arguments read, or sharing storage, keep their copy."""

from __future__ import annotations

import runpy
from pathlib import Path

from sqlalchemy import select

import tilelens
from tilelens.replay import replay_launch
from tilelens.store import History
from tilelens.store.sql.models import LaunchArg

SCRIPT = """
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, label_ptr, out_ptr, n, HAS_LABEL: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if HAS_LABEL:
        x = x + tl.load(label_ptr)
    tl.store(out_ptr + offs, x * 2.0, mask=mask)


WITH_LABEL = __WITH__

if __name__ == "__main__":
    x = torch.arange(16, dtype=torch.float32)
    for fill in (1.0, 2.0, 3.0):
        out = torch.empty(16)
        scale_kernel[(1,)](x, torch.full((4,), fill), out, 16, HAS_LABEL=WITH_LABEL, BLOCK=16)
        assert torch.equal(out, (x + (fill if WITH_LABEL else 0.0)) * 2.0)
    out = torch.empty(16)
    scale_kernel[(1,)](x, out, out, 16, HAS_LABEL=WITH_LABEL, BLOCK=16)  # the placeholder is the output itself
"""


def _record(tmp_path: Path, has_label: bool) -> tuple[dict[str, str], list[int], Path]:
    script = tmp_path / "scale.py"
    script.write_text(SCRIPT.replace("__WITH__", str(has_label)))
    where = {"db": str(tmp_path / "t.db"), "blobs": str(tmp_path / "blobs")}
    with tilelens.record(**where) as rec:
        runpy.run_path(str(script), run_name="__main__")
    return where, list(rec.launch_ids), script


def _label_rows(where: dict[str, str]) -> list[LaunchArg]:
    with History.open(**where) as h, h.session() as s:
        return list(
            s.scalars(select(LaunchArg).where(LaunchArg.name == "label_ptr").order_by(LaunchArg.launch_id))
        )


def test_an_unread_placeholder_is_stored_once_and_empty(tmp_path: Path) -> None:
    where, launches, _ = _record(tmp_path, has_label=False)
    rows = _label_rows(where)
    assert len(rows) == 4
    # Three fresh placeholders holding 1.0, 2.0, 3.0: one empty snapshot, stored once, unchanged (after = before).
    assert [r.snapshot_elements for r in rows[:3]] == [0, 0, 0]
    assert len({r.before_blob for r in rows[:3]}) == 1 and rows[0].before_blob is not None
    assert [r.after_blob for r in rows[:3]] == [rows[0].before_blob] * 3
    # Passed as the output too (one storage, two arguments): the whole copy stays.
    assert rows[3].snapshot_elements is None
    with History.open(**where) as h:
        assert [replay_launch(h, lid, device="cpu").outcome for lid in launches] == ["match"] * 4


def test_a_read_placeholder_keeps_its_values(tmp_path: Path) -> None:
    where, launches, _ = _record(tmp_path, has_label=True)
    rows = _label_rows(where)
    assert [r.snapshot_elements for r in rows] == [None] * 4
    assert len({r.before_blob for r in rows[:3]}) == 3  # 1.0, 2.0, 3.0: three contents
    with History.open(**where) as h:
        assert [replay_launch(h, lid, device="cpu").outcome for lid in launches] == ["match"] * 4


def test_an_edited_kernel_reading_the_placeholder_is_told_apart(tmp_path: Path) -> None:
    where, launches, script = _record(tmp_path, has_label=False)
    script.write_text(script.read_text().replace("    if HAS_LABEL:\n", "    if True:\n", 1))
    with History.open(**where) as h:
        r = replay_launch(h, launches[0], allow_changed=True)
    assert r.outcome == "unknown-read" and r.exit_code == 3
    assert r.unknown_reads == ["label_ptr: read span element 0, which the record does not hold"]


def test_an_empty_sparse_snapshot_is_encoded_once_and_byte_identical(tmp_path: Path) -> None:
    import hashlib

    import numpy as np
    import torch

    from tilelens.store import BlobStore
    from tilelens.store.files.blobs import table_to_ipc
    from tilelens.store.files.sparse import SparseSnapshot, sparse_to_table, table_to_sparse

    def empty(offset: int) -> SparseSnapshot:
        return SparseSnapshot(torch.float32, (4,), (1,), offset, 4, np.zeros(0, np.int64), torch.empty(0))

    store = BlobStore(tmp_path / "blobs")
    first, again, other = (
        store.store_sparse(empty(0)),
        store.store_sparse(empty(0)),
        store.store_sparse(empty(2)),
    )
    expected = table_to_ipc(sparse_to_table(empty(0)))
    assert first == again and first.sha256 == hashlib.sha256(expected).hexdigest()
    assert first.rows == sparse_to_table(empty(0)).num_rows and first.size == expected.size
    assert other.sha256 != first.sha256  # the geometry is the content
    back = table_to_sparse(store.get_table(other.sha256))
    assert (back.storage_offset, back.span, back.elements) == (2, 4, 0)


def test_snapshots_of_arguments_the_last_launch_accessed_are_stored_early(
    tmp_path: Path, monkeypatch
) -> None:  # noqa: ANN001
    from tilelens.store import BlobStore
    from tilelens.store.sql.models import Blob

    early: list[tuple[int, ...]] = []
    real = BlobStore.store_early

    def spy(self: BlobStore, tensor, kind: str = "tensor") -> None:  # noqa: ANN001
        early.append(tuple(tensor.shape))
        real(self, tensor, kind)

    monkeypatch.setattr(BlobStore, "store_early", spy)
    where, launches, _ = _record(tmp_path, has_label=False)
    # The first launch: nothing known yet. Then x and out (16 elements) in each launch, before the kernel runs;
    # never the unread label (4 elements), whose snapshot ends up empty.
    assert early == [(16,)] * 6
    with History.open(**where) as h:
        assert [replay_launch(h, lid, device="cpu").outcome for lid in launches] == ["match"] * 4
        with h.session() as s:
            named = set(s.scalars(select(Blob.sha256)))
    files = {p.name for p in Path(where["blobs"]).rglob("*") if p.is_file()}
    assert files == named  # every early blob is one a launch names; no temp file left
