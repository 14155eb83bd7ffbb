"""Blob store: content addressing, atomic single-copy writes, verified reads."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tilelens.store import BlobCorruptError, BlobMissingError, BlobStore


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs")


def test_bytes_are_stored_under_their_sha256(store: BlobStore) -> None:
    data = b"hello tilelens"
    sha = store.put_bytes(data, "raw")
    assert sha == hashlib.sha256(data).hexdigest()
    path = store.root / sha[:2] / sha
    assert path.read_bytes() == data
    assert store.get_bytes(sha) == data


def test_blob_files_are_read_only_and_no_temp_files_remain(store: BlobStore) -> None:
    for i in range(5):
        store.put_bytes(bytes([i]) * 100, "raw")
    files = [p for p in store.root.rglob("*") if p.is_file()]
    assert len(files) == 5
    assert all(not p.name.startswith(".") for p in files)
    assert all(stat.S_IMODE(p.stat().st_mode) & 0o222 == 0 for p in files)


def test_same_content_is_written_once(store: BlobStore) -> None:
    sha = store.put_bytes(b"x" * 1000, "raw")
    before = os.stat(store.path(sha))
    assert store.put_bytes(bytearray(b"x" * 1000), "raw") == sha
    after = os.stat(store.path(sha))
    # The same file, not rewritten; its mtime is refreshed so that gc knows a writer is about to use it.
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)
    assert after.st_mtime_ns >= before.st_mtime_ns


def test_truncated_blob_is_replaced_on_next_put(store: BlobStore) -> None:
    data = os.urandom(4096)
    sha = store.put_bytes(data, "raw")
    path = store.path(sha)
    path.chmod(0o644)
    path.write_bytes(data[:100])  # as if a non-atomic writer had died
    with pytest.raises(BlobCorruptError):
        store.get_bytes(sha)
    store.put_bytes(data, "raw")
    assert store.get_bytes(sha) == data


def _flip(path: Path, at: int) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_corrupt_blob_of_the_same_size_is_rewritten_by_a_new_store(store: BlobStore) -> None:
    data = os.urandom(4096)
    sha = store.put_bytes(data, "raw")
    path = store.path(sha)
    _flip(path, 1234)  # same name, same size: a stat cannot tell
    fresh = BlobStore(store.root)  # another process, in effect: nothing verified yet
    assert fresh.put_bytes(data, "raw") == sha
    assert path.read_bytes() == data and fresh.get_bytes(sha) == data
    assert stat.S_IMODE(path.stat().st_mode) & 0o222 == 0  # rewritten as a blob, read-only
    assert [p.name for p in path.parent.iterdir()] == [sha]  # no temp file left


def test_an_intact_blob_is_compared_once_per_store_and_never_rewritten(store: BlobStore, monkeypatch) -> None:  # noqa: ANN001
    data = os.urandom(4096)
    sha = BlobStore(store.root).put_bytes(data, "raw")
    before = os.stat(store.path(sha))
    from tilelens.store.files import blobs

    compared: list[Path] = []
    real = blobs._same_content
    monkeypatch.setattr(blobs, "_same_content", lambda p, v: compared.append(p) or real(p, v))
    for _ in range(3):
        assert store.put_bytes(data, "raw") == sha
    after = os.stat(store.path(sha))
    assert compared == [store.path(sha)]
    assert after.st_ino == before.st_ino  # never rewritten ...
    assert after.st_mtime_ns >= before.st_mtime_ns  # ... only marked as used, so gc keeps it


def test_corrupt_tensor_blob_is_repaired_when_the_tensor_is_stored_again(store: BlobStore) -> None:
    t = torch.arange(1000, dtype=torch.float32)
    sha = store.put_tensor(t)
    _flip(store.path(sha), store.path(sha).stat().st_size // 2)
    with pytest.raises(BlobCorruptError):
        BlobStore(store.root).get_tensor(sha)
    fresh = BlobStore(store.root)
    assert fresh.put_tensor(t.clone()) == sha
    assert torch.equal(fresh.get_tensor(sha), t)


def test_flipped_byte_raises_corrupt_error_naming_the_blob(store: BlobStore) -> None:
    sha = store.put_tensor(torch.randn(100))
    path = store.path(sha)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(raw))
    with pytest.raises(BlobCorruptError, match=sha) as info:
        store.get_tensor(sha)
    assert info.value.sha256 == sha
    assert info.value.actual == hashlib.sha256(bytes(raw)).hexdigest()


def test_missing_blob_names_sha_and_path(store: BlobStore) -> None:
    sha = "ab" * 32
    with pytest.raises(BlobMissingError, match=sha):
        store.get_bytes(sha)


@pytest.mark.parametrize("bad", ["../../etc/passwd", "AB" * 32, "ab" * 31, ""])
def test_names_that_are_not_sha256_are_refused(store: BlobStore, bad: str) -> None:
    with pytest.raises(ValueError, match="sha256"):
        store.path(bad)


def test_tables_are_parquet_with_zstd(store: BlobStore) -> None:
    table = pa.table({"a": list(range(1000)), "b": ["x", "y"] * 500})
    ref = store.store_table(table, "trace")
    assert ref.rows == 1000 and ref.size == store.path(ref.sha256).stat().st_size and ref.kind == "trace"
    meta = pq.ParquetFile(store.path(ref.sha256)).metadata
    assert {meta.row_group(0).column(i).compression for i in range(2)} == {"ZSTD"}
    assert store.get_table(ref.sha256).equals(table)


def test_table_write_options_reach_parquet(store: BlobStore) -> None:
    table = pa.table({"off": pa.array(range(0, 40000, 4), pa.int64())})
    sha = store.put_table(
        table, "trace", use_dictionary=False, column_encoding={"off": "DELTA_BINARY_PACKED"}
    )
    col = pq.ParquetFile(store.path(sha)).metadata.row_group(0).column(0)
    assert "DELTA_BINARY_PACKED" in col.encodings
    assert store.get_table(sha).equals(table)


def test_equal_tables_share_one_blob(store: BlobStore) -> None:
    assert store.put_table(pa.table({"a": [1, 2]}), "t") == store.put_table(pa.table({"a": [1, 2]}), "t")


def test_tensor_round_trip_and_dedup(store: BlobStore) -> None:
    t = torch.randn(8, 16).t()
    sha = store.put_tensor(t)
    back = store.get_tensor(sha)
    assert back.stride() == t.stride() and torch.equal(back, t)
    assert store.put_tensor(t.clone().t().contiguous().t()) == sha  # same view geometry and bytes
    assert store.put_tensor(t.contiguous()) != sha  # same values, other strides: another blob
    assert store.path(sha).read_bytes()[:6] == b"ARROW1"  # tensors are Arrow IPC files


def test_tensor_blob_written_as_parquet_still_reads(store: BlobStore) -> None:
    from tilelens.store.files.blobs import table_to_parquet
    from tilelens.store.files.tensors import tensor_to_table

    t = torch.arange(12, dtype=torch.int16).view(3, 4)[:, 1:]
    sha = store.put_bytes(table_to_parquet(tensor_to_table(t)), "tensor")
    back = store.get_tensor(sha)
    assert (
        back.stride() == t.stride() and back.storage_offset() == t.storage_offset() and torch.equal(back, t)
    )


def test_recent_identical_tensor_is_not_encoded_again(store: BlobStore, monkeypatch) -> None:
    writes = []
    original = store.store_bytes
    monkeypatch.setattr(
        store,
        "store_bytes",
        lambda data, kind, rows=None: writes.append(kind) or original(data, kind, rows=rows),
    )
    t = torch.randn(1000)
    first = store.store_tensor(t)
    assert store.store_tensor(t.clone()) == first  # same bytes, found by comparison
    assert writes == ["tensor"]
    t[3] = 42.0  # the store kept its own copy: a later change is new content
    changed = store.store_tensor(t)
    assert changed.sha256 != first.sha256 and writes == ["tensor", "tensor"]
    assert torch.equal(store.get_tensor(changed.sha256), t)
    assert store.store_tensor(t.view(10, 100)).sha256 != changed.sha256  # other geometry, other blob


def test_a_batch_makes_its_blobs_appear_when_it_ends(
    store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tilelens.store.files.durable as durable

    synced: list[str] = []
    real = durable.fsync_path
    monkeypatch.setattr(durable, "fsync_path", lambda p: (synced.append(Path(p).name), real(p))[1])
    blobs = [f"blob {i}".encode() for i in range(3)]
    with store.batch():
        shas = [store.put_bytes(b, "raw") for b in blobs]
        assert store.put_bytes(blobs[0], "raw") == shas[0]  # the same content twice: one pending file
        with store.batch():  # a nested block joins the outer one
            store.put_bytes(b"inner", "raw")
        assert not any(store.exists(s) for s in shas)  # nothing is named before the batch is durable
        assert len(list(store.root.rglob("*.tmp"))) == 4
    assert [store.get_bytes(s) for s in shas] == blobs and store.exists(hashlib.sha256(b"inner").hexdigest())
    assert not list(store.root.rglob("*.tmp"))
    assert all(not os.stat(store.path(s)).st_mode & stat.S_IWUSR for s in shas)  # read-only, as always
    # Each temp file fsync'd, then each folder (blob subfolders and the root that got new ones): 4 + 4 + 1.
    assert sum(name.endswith(".tmp") for name in synced) == 4
    assert {name for name in synced if not name.endswith(".tmp")} == {s[:2] for s in shas} | {
        hashlib.sha256(b"inner").hexdigest()[:2],
        store.root.name,
    }


def test_a_failed_batch_names_nothing_and_leaves_no_temp_files(store: BlobStore) -> None:
    with pytest.raises(RuntimeError), store.batch():
        sha = store.put_bytes(b"never named", "raw")
        raise RuntimeError("the launch's rows could not be built")
    assert not store.exists(sha) and not list(store.root.rglob("*.tmp"))
    assert store.put_bytes(b"never named", "raw") == sha and store.get_bytes(sha) == b"never named"


def test_a_cycle_of_many_same_shaped_tensors_is_recognised_without_encoding(
    store: BlobStore, monkeypatch
) -> None:
    writes: list[str] = []
    original = store.store_bytes
    monkeypatch.setattr(
        store,
        "store_bytes",
        lambda data, kind, rows=None: writes.append(kind) or original(data, kind, rows=rows),
    )
    tensors = [torch.randn(4096) for _ in range(12)]  # one launch's inputs, outputs, befores and afters
    refs = [store.store_tensor(t) for t in tensors]
    assert len(writes) == 12
    for _ in range(3):  # the next launches store the same ones again, in the same order
        assert [store.store_tensor(t.clone()) for t in tensors] == refs
    assert len(writes) == 12
    # A change no fingerprint sample covers is still new content: bytes are compared in full.
    changed = tensors[5].clone()
    changed.view(torch.uint8)[1001] ^= 1
    ref = store.store_tensor(changed)
    assert ref.sha256 != refs[5].sha256 and len(writes) == 13
    assert store.get_tensor(ref.sha256).view(torch.uint8).tolist() == changed.view(torch.uint8).tolist()


def test_recent_tensors_stay_within_their_byte_budget() -> None:
    from tilelens.store.files.blobs import BlobRef, _RecentTensors

    recent = _RecentTensors(budget=10 * 4096)
    tensors = [torch.full((1024,), float(i)) for i in range(25)]
    for i, t in enumerate(tensors):
        recent.add(t, BlobRef(f"{i:064x}", "tensor", 4096))
    assert recent._bytes == 10 * 4096
    assert [recent.find(t, "tensor") is not None for t in tensors] == [False] * 15 + [True] * 10
    assert recent.find(tensors[20], "trace") is None  # another kind: another blob


def test_tables_read_lately_are_kept_decoded_and_verify_still_reads_the_file(store: BlobStore) -> None:
    from tilelens.errors import BlobCorruptError

    t = torch.arange(64, dtype=torch.int32)
    sha = store.put_tensor(t)
    first = store.get_table(sha)
    assert store.get_table(sha) is first  # decoded once, from bytes whose hash matched the name
    path = store.path(sha)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert torch.equal(store.get_tensor(sha), t)  # what this process verified, not the flipped byte
    with pytest.raises(BlobCorruptError):
        store.verify(sha)
    with pytest.raises(BlobCorruptError):
        BlobStore(store.root).get_tensor(sha)  # another process reads the file, and finds it corrupt


def test_kept_tables_stay_within_their_byte_budget() -> None:
    from tilelens.store.files.blobs import _ReadTables

    kept = _ReadTables(budget=40_000)
    tables = [pa.table({"a": pa.array(np.full(1000, i, dtype=np.int64))}) for i in range(6)]  # 8000 B each
    for i, table in enumerate(tables):
        kept.add(f"{i:064x}", table)
    assert [kept.get(f"{i:064x}") is not None for i in range(6)] == [False] + [True] * 5
    kept.add("f" * 64, pa.table({"a": pa.array(np.zeros(2000, dtype=np.int64))}))  # over a quarter: not kept
    assert kept.get("f" * 64) is None


def test_a_batch_starts_each_fsync_when_the_file_is_written_and_renames_only_after_it(
    store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import tilelens.store.files.durable as durable

    release = threading.Event()
    started: list[str] = []
    real = durable.fsync_path

    def slow_fsync(p: Path) -> None:
        if Path(p).name.endswith(".tmp"):
            started.append(Path(p).name)
            release.wait(5)
        real(p)

    monkeypatch.setattr(durable, "fsync_path", slow_fsync)
    with store.batch():
        sha = store.put_bytes(b"first blob", "raw")
        for _ in range(100):  # the fsync runs on its own thread while the launch goes on
            if started:
                break
            threading.Event().wait(0.01)
        assert len(started) == 1 and not store.exists(sha)
        release.set()
    assert store.get_bytes(sha) == b"first blob" and not list(store.root.rglob("*.tmp"))
    assert not [t for t in threading.enumerate() if t.name == "tilelens-fsync"]  # none outlives the batch


def test_a_failed_fsync_fails_the_batch_and_names_nothing(
    store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tilelens.store.files.durable as durable

    def failing(p: Path) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(durable, "fsync_path", failing)
    with pytest.raises(OSError, match="Input/output"), store.batch():
        sha = store.put_bytes(b"never durable", "raw")
    assert not store.exists(sha) and not list(store.root.rglob("*.tmp"))


def test_an_early_stored_tensor_is_durable_under_its_name_before_it_is_named(
    store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import tilelens.store.files.durable as durable

    release = threading.Event()
    synced: list[str] = []
    real = durable.fsync_path

    def held_fsync(p: Path) -> None:
        release.wait(5)
        synced.append(Path(p).name)
        real(p)

    monkeypatch.setattr(durable, "fsync_path", held_fsync)
    t = torch.arange(4096, dtype=torch.float32)
    store.store_early(t)
    assert len(list(store.root.rglob("*.tmp"))) == 1  # the temp file is written at once; nothing named yet
    assert not [p for p in store.root.rglob("*") if p.is_file() and not p.name.endswith(".tmp")]
    release.set()
    ref = store.store_tensor(t)  # waits for the early blob: its fsyncs ran, then it is known intact
    assert (
        synced[0].endswith(".tmp") and synced[1] == ref.sha256[:2] and len(synced) == 3
    )  # + new folder's parent
    assert torch.equal(store.get_tensor(ref.sha256), t) and not list(store.root.rglob("*.tmp"))
    assert not [th for th in threading.enumerate() if th.name == "tilelens-fsync"]
    monkeypatch.setattr(durable, "fsync_path", real)
    assert store.store_tensor(t.clone()) == ref  # the same bytes: the same blob, not written again


def test_an_early_store_that_fails_leaves_the_blob_to_the_ordinary_store(
    store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tilelens.store.files.durable as durable

    real = durable.fsync_path
    calls: list[str] = []

    def failing_once(p: Path) -> None:
        calls.append(Path(p).name)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        real(p)

    monkeypatch.setattr(durable, "fsync_path", failing_once)
    t = torch.arange(100, dtype=torch.int64)
    store.store_early(t)
    with store.batch():  # as History.write_launch stores: the early blob failed, so the batch writes it
        ref = store.store_tensor(t)
    assert calls[0].endswith(".tmp") and any(c.endswith(".tmp") for c in calls[1:])
    assert torch.equal(store.get_tensor(ref.sha256), t) and not list(store.root.rglob("*.tmp"))
