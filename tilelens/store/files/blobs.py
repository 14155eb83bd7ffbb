"""Content-addressed blob store: large payloads (tensors, access traces) as files named by their sha256.

Blobs are written before any row references them and each one appears atomically (temp file, fsync, rename,
fsync of the folder), so a crash can leave an unreferenced blob or a stray temp file but never a row pointing
at a missing or half-written file. Reusing a blob that is already there sets its mtime to now: ``tilelens gc``
(:mod:`tilelens.store.admin.gc`) deletes only unreferenced files older than its grace period, so a file a writer is
about to reference is never collected. Naming by content makes a blob immutable and deduplicates it for free: an
unchanged tensor recorded a thousand times is one file. Reads re-hash, so disk corruption is reported with the
blob's name instead of surfacing as a wrong replay.

Invariant: a ``store_*`` call returns a reference only to a file this process knows to hold exactly those
bytes, because it wrote the file or compared it with the bytes once (a name found on disk is not proof: a
flipped byte keeps the name and the size). A file that differs is replaced atomically by the right bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from tilelens.errors import BlobCorruptError, BlobError, BlobFolderError, BlobMissingError
from tilelens.store.files.durable import Batch, EarlyBlob

if TYPE_CHECKING:
    import torch

    from tilelens.store.files.sparse import SparseSnapshot

_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
# Encoded empty sparse snapshots by geometry (dtype, shape, strides, offset, span): immutable Arrow buffers.
_EMPTY_SPARSE: dict[tuple[Any, ...], tuple[pa.Buffer, int]] = {}
PARQUET_COMPRESSION = "zstd"


@dataclass(frozen=True)
class BlobRef:
    """What the ``blobs`` table records about a stored blob."""

    sha256: str
    kind: str
    size: int
    rows: int | None = None


def _fsync_dir(path: Path) -> None:
    # Makes the new directory entry itself durable; without it a power cut can lose a renamed file.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def refresh(path: Path) -> bool:
    """Mark an existing blob as just used (mtime now), so gc leaves it alone; False if it is not there.

    A file this user may not touch counts as missing: the caller then writes the blob again, as its own.
    """
    try:
        os.utime(path)
    except (FileNotFoundError, PermissionError):
        return False
    return True


def _same_content(path: Path, view: memoryview, chunk: int = 8 << 20) -> bool:
    """Whether the file holds exactly ``view``'s bytes. A comparison, not a hash: ``view`` hashes to the
    file's name already, so equal bytes prove the file intact, and memcmp is several times faster.
    (``bytearray == memoryview`` is a memcmp; ``memoryview == memoryview`` compares item by item.)"""
    try:
        with open(path, "rb") as f:
            buf = bytearray(min(chunk, view.nbytes))
            for start in range(0, view.nbytes, chunk):
                part = view[start : start + chunk]
                if part.nbytes != len(buf):
                    buf = bytearray(part.nbytes)
                if f.readinto(buf) != part.nbytes or buf != part:
                    return False
            return f.read(1) == b""
    except OSError:
        return False


def table_to_parquet(table: pa.Table, **write_options: Any) -> pa.Buffer:
    """Serialise deterministically: the same table always gives the same bytes, hence the same blob."""
    sink = pa.BufferOutputStream()
    options: dict[str, Any] = {"compression": PARQUET_COMPRESSION}
    options.update(write_options)
    pq.write_table(table, sink, **options)
    return sink.getvalue()


class _RecentTensors:
    """The bytes of the tensors stored lately (up to a byte budget), to skip encoding and hashing them again.

    A launch usually stores several same-shaped tensors (inputs, outputs, their before and after), and the next
    launch of the same program stores the same ones again in the same order: a short list per geometry, tried
    newest first, misses every time once the cycle is longer than the list. So every remembered tensor is filed
    under its geometry and a fingerprint of its bytes (a few hundred bytes sampled at fixed positions), and the
    only candidates compared in full are those with the same fingerprint: a lookup costs one sample and, on a
    hit, one memcmp, whatever the number of tensors remembered. Least recently used ones go first past the
    budget.

    Kept and compared as numpy byte arrays: plain memcpy/memcmp, where torch's copy and compare kernels would
    wake its thread pool for every tensor.

    Invariant: ``find`` returns a reference only for bytes equal, byte for byte, to a copy taken when that
    reference was stored, under the same kind and view geometry.
    """

    SAMPLES = 256  # bytes sampled per fingerprint (beyond the first and last 32)

    def __init__(self, budget: int = 64 << 20) -> None:
        # (kind, geometry, fingerprint) -> [(bytes, ref)], least recently used key first
        self._entries: OrderedDict[tuple[Any, ...], list[tuple[Any, BlobRef]]] = OrderedDict()
        self._bytes = 0
        self._budget = budget

    @staticmethod
    def _bytes_of(t: Any) -> Any:
        import torch

        if t.device.type != "cpu" or t.numel() == 0 or not t.is_contiguous():
            return None
        return t.detach().reshape(-1).view(torch.uint8).numpy()

    @classmethod
    def _key(cls, t: Any, kind: str, raw: Any) -> tuple[Any, ...]:
        n = raw.size
        step = max(1, n // cls.SAMPLES)
        sample = raw[::step].tobytes() + raw[:32].tobytes() + raw[-32:].tobytes()
        return (kind, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset(), sample)

    def find(self, t: Any, kind: str) -> BlobRef | None:
        import numpy as np

        raw = self._bytes_of(t)
        if raw is None:
            return None
        key = self._key(t, kind, raw)
        for other, ref in reversed(self._entries.get(key, ())):
            if np.array_equal(raw, other):
                self._entries.move_to_end(key)
                found: BlobRef = ref
                return found
        return None

    def add(self, t: Any, ref: BlobRef) -> None:
        raw = self._bytes_of(t)
        if raw is None or raw.nbytes > self._budget:
            return
        key = self._key(t, ref.kind, raw)
        self._entries.setdefault(key, []).append(
            (raw.copy(), ref)
        )  # a copy: the caller may write to its tensor
        self._entries.move_to_end(key)
        self._bytes += raw.nbytes
        while self._bytes > self._budget:
            _, same = next(iter(self._entries.items()))
            dropped, _ = same.pop(0)
            self._bytes -= dropped.nbytes
            if not same:
                self._entries.popitem(last=False)


class _ReadTables:
    """Decoded tables of blobs read lately, by name, least recently used first out past a byte budget."""

    def __init__(self, budget: int = 64 << 20) -> None:
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._bytes = 0
        self._budget = budget

    def get(self, sha256: str) -> pa.Table | None:
        table = self._tables.get(sha256)
        if table is not None:
            self._tables.move_to_end(sha256)
        return table

    def add(self, sha256: str, table: pa.Table) -> None:
        size = table.nbytes
        if size > self._budget // 4 or sha256 in self._tables:
            return
        self._tables[sha256] = table
        self._bytes += size
        while self._bytes > self._budget:
            _, dropped = self._tables.popitem(last=False)
            self._bytes -= dropped.nbytes


IPC_MAGIC = b"ARROW1"
IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
IPC_PLAIN = pa.ipc.IpcWriteOptions()
_IPC_READ = pa.ipc.IpcReadOptions(use_threads=False)
COMPRESS_FROM = 64 << 10  # below this, compressing costs more time than the bytes it saves are worth


def table_to_ipc(table: pa.Table) -> pa.Buffer:
    """Arrow IPC file bytes; deterministic like ``table_to_parquet``."""
    sink = pa.BufferOutputStream()
    options = IPC_OPTIONS if table.nbytes >= COMPRESS_FROM else IPC_PLAIN
    with pa.ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()


def check_blob_folder(root: str | Path) -> None:
    """Refuse a blob folder that cannot take blobs (a file, a folder this process may not write)."""
    BlobStore(root).check_writable()


class BlobStore:
    """Blobs under ``root/<sha[:2]>/<sha>``; ``put_*`` return the sha256, ``store_*`` a full :class:`BlobRef`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._recent = _RecentTensors()
        # Names whose file this store wrote or compared with the content: checked once per process, so
        # a tensor recorded a thousand times is compared once, not read back a thousand times.
        self._intact: set[str] = set()
        self._batch: Batch | None = None  # while ``batch()`` runs: new files made durable together at its end
        self._batch_shas: set[str] = set()
        self._tables = _ReadTables()
        # Blobs ``store_early`` started (tensor, its reference, the job): settled before any store_* or batch.
        self._early: list[tuple[Any, BlobRef, EarlyBlob]] = []
        # Names checked and joined lately (each launch names its blobs again).
        self._paths: dict[str, Path] = {}

    def __repr__(self) -> str:
        return f"BlobStore({str(self.root)!r})"

    def check_writable(self) -> None:
        """Refuse a blob folder that cannot take blobs, before anything is recorded into it.

        A path that is a file, or a folder (or, when it does not exist yet, its nearest existing parent) this
        process may not write, would otherwise fail only at the first launch, deep inside the user's program.
        """
        folder = self.root
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            raise BlobFolderError(f"cannot use blob folder {self.root}: {folder} is not a folder")
        if not os.access(folder, os.W_OK | os.X_OK):
            what = "it is" if folder == self.root else f"{folder} is"
            raise BlobFolderError(f"cannot use blob folder {self.root}: {what} not writable")

    def path(self, sha256: str) -> Path:
        known = self._paths.get(sha256)
        if known is not None:
            return known
        if not _SHA_RE.match(sha256):
            # Also what keeps a crafted name from escaping the root.
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        if len(self._paths) >= 4096:
            self._paths.clear()
        path = self._paths[sha256] = self.root / sha256[:2] / sha256
        return path

    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    # -- writing -------------------------------------------------------------------------------------------

    def store_early(self, tensor: torch.Tensor, kind: str = "tensor") -> None:
        """Start storing ``tensor``, a snapshot a launch about to run will name (its before-values, copied before
        the kernel runs), when it is new to this store: encoded, hashed and written to a temp file now, made
        durable under its name on a thread (:class:`~tilelens.store.files.durable.EarlyBlob`) while the kernel runs.

        Nothing is promised until the next ``store_*`` or ``batch`` call, which first waits for every blob
        started here (``_settle``): a stored reference still names only a file known durable and intact. A
        launch that ends up not naming the blob leaves an unreferenced file, which ``tilelens gc`` removes.
        """
        from tilelens.store.files.tensors import tensor_to_table

        if self._batch is not None or self._recent.find(tensor, kind) is not None:
            return
        table = tensor_to_table(tensor)
        view = memoryview(table_to_ipc(table)).cast("B")
        sha = hashlib.sha256(view).hexdigest()
        path = self.path(sha)
        if sha in self._intact or path.exists():  # the ordinary path checks and refreshes a known file
            return
        ref = BlobRef(sha, kind, view.nbytes, table.num_rows)
        self._early.append((tensor, ref, EarlyBlob(path, view)))

    def _settle(self) -> None:
        """Wait for the blobs ``store_early`` started; those now durable under their names count as written."""
        early, self._early = self._early, []
        for tensor, ref, job in early:
            if job.wait():
                self._intact.add(ref.sha256)
                self._recent.add(tensor, ref)

    def store_bytes(
        self, data: bytes | bytearray | memoryview | pa.Buffer, kind: str, rows: int | None = None
    ) -> BlobRef:
        if self._early:
            self._settle()
        view = memoryview(data).cast("B")
        sha = hashlib.sha256(view).hexdigest()
        path = self.path(sha)
        size = view.nbytes
        if self._batch is not None and path in self._batch:  # written moments ago in this batch
            return BlobRef(sha, kind, size, rows)
        try:
            on_disk = path.stat().st_size
        except FileNotFoundError:
            on_disk = None
        intact = on_disk == size and (sha in self._intact or _same_content(path, view))
        # A reused file gets mtime now so gc leaves it alone; one this user may not touch is written anew.
        if not (intact and refresh(path)):
            # Missing, truncated, corrupt or not ours: the right bytes, atomically (with the batch, at its end).
            if self._batch is not None:
                self._batch.add(path, view)
                self._batch_shas.add(sha)
            else:
                self._write_atomic(path, view)
        self._intact.add(sha)
        return BlobRef(sha, kind, size, rows)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Blobs stored inside are durable, under their names, when the block ends (not when ``store_*``
        returns): their fsyncs overlap (:mod:`tilelens.store.files.durable`). Write no row naming them before the
        block ends. A block inside another joins it."""
        if self._early:
            self._settle()
        if self._batch is not None:
            yield
            return
        self._batch, self._batch_shas = Batch(), set()
        try:
            yield
            self._batch.close()
        except BaseException:
            self._batch.discard()
            self._intact -= self._batch_shas  # never named: a later store writes them again
            raise
        finally:
            self._batch = None

    def _write_atomic(self, path: Path, view: memoryview) -> None:
        folder = path.parent
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            _fsync_dir(folder.parent)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(view)
                f.flush()
                os.fsync(f.fileno())
            # Read-only: a blob is immutable by construction, so nothing should ever open it for writing.
            os.chmod(tmp, 0o444)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(folder)

    def store_table(self, table: pa.Table, kind: str, **write_options: Any) -> BlobRef:
        """Parquet with zstd; ``write_options`` go to ``pyarrow.parquet.write_table`` (e.g. column_encoding)."""
        return self.store_bytes(table_to_parquet(table, **write_options), kind, rows=table.num_rows)

    def store_tensor(self, tensor: torch.Tensor, kind: str = "tensor") -> BlobRef:
        """An Arrow IPC file (lz4 buffers): a one-row table of raw bytes needs none of Parquet's machinery,
        which costs twenty times more to write; lz4 still shrinks the zero-filled outputs most launches start
        from, and passes incompressible floats through at memory speed.

        A tensor byte-identical to one stored moments ago (the same input launched again, an output that
        becomes the next launch's input) is recognised by comparing bytes, which is far cheaper than
        hashing and encoding it again."""
        from tilelens.store.files.tensors import tensor_to_table

        if self._early:
            self._settle()
        known = self._recent.find(tensor, kind)
        if known is not None and refresh(self.path(known.sha256)):
            return known
        table = tensor_to_table(tensor)
        ref = self.store_bytes(table_to_ipc(table), kind, rows=table.num_rows)
        self._recent.add(tensor, ref)
        return ref

    def store_sparse(self, snap: SparseSnapshot, kind: str = "tensor") -> BlobRef:
        """A sparse snapshot (:mod:`tilelens.store.files.sparse`): Arrow IPC like a tensor, content-addressed too."""
        from tilelens.store.files.sparse import sparse_to_table

        if snap.elements:
            table = sparse_to_table(snap)
            return self.store_bytes(table_to_ipc(table), kind, rows=table.num_rows)
        # An empty one (an argument the launch never accessed) is its geometry only: encoded once per process.
        key = (str(snap.dtype), snap.shape, snap.strides, snap.storage_offset, snap.span)
        found = _EMPTY_SPARSE.get(key)
        if found is None:
            if len(_EMPTY_SPARSE) >= 1024:
                _EMPTY_SPARSE.clear()
            table = sparse_to_table(snap)
            found = _EMPTY_SPARSE[key] = (table_to_ipc(table), table.num_rows)
        return self.store_bytes(found[0], kind, rows=found[1])

    def put_bytes(self, data: bytes | bytearray | memoryview | pa.Buffer, kind: str) -> str:
        return self.store_bytes(data, kind).sha256

    def put_table(self, table: pa.Table, kind: str, **write_options: Any) -> str:
        return self.store_table(table, kind, **write_options).sha256

    def put_tensor(self, tensor: torch.Tensor) -> str:
        return self.store_tensor(tensor).sha256

    # -- reading -------------------------------------------------------------------------------------------

    def get_bytes(self, sha256: str) -> bytes:
        path = self.path(sha256)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BlobMissingError(sha256, path) from None
        except OSError as exc:  # unreadable (permissions, I/O): still the blob's problem, named as such
            raise BlobError(sha256, path, f"blob {sha256} cannot be read ({exc.strerror}: {path})") from exc
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:
            raise BlobCorruptError(sha256, path, actual)
        return data

    def verify(self, sha256: str) -> None:
        self.get_bytes(sha256)

    def get_table(self, sha256: str) -> pa.Table:
        """A table blob, Parquet or Arrow IPC (told apart by their magic bytes).

        Tables read lately are kept decoded (:class:`_ReadTables`): a batch of replays reads the same blobs
        again and again (launches of one kernel share a deduplicated trace; an output is the next launch's
        input), and each read would re-hash and decode them. A kept table was decoded from bytes whose hash
        matched its name in this process, and Arrow tables are immutable; ``get_bytes`` and ``verify`` always
        read the file."""
        table = self._tables.get(sha256)
        if table is not None:
            return table
        data = self.get_bytes(sha256)
        if data[:6] == IPC_MAGIC:
            # One thread: a threaded read starts Arrow's CPU pool, whose teardown at exit, racing its
            # threads, once aborted a finished `diff` ("terminate called without an active exception").
            table = pa.ipc.open_file(pa.BufferReader(data), options=_IPC_READ).read_all()
        else:
            # ParquetFile.read, not pq.read_table: the latter imports pyarrow.dataset, and with it pandas.
            table = pq.ParquetFile(pa.BufferReader(data), pre_buffer=False).read(use_threads=False)
        self._tables.add(sha256, table)
        return table

    def get_tensor(self, sha256: str) -> torch.Tensor:
        from tilelens.store.files.tensors import table_to_tensor

        return table_to_tensor(self.get_table(sha256))

    def get_snapshot(self, sha256: str) -> torch.Tensor | SparseSnapshot:
        """A tensor snapshot blob: a whole span (a tensor) or a sparse one (:mod:`tilelens.store.files.sparse`)."""
        from tilelens.store.files.sparse import is_sparse_table, table_to_sparse
        from tilelens.store.files.tensors import table_to_tensor

        table = self.get_table(sha256)
        return table_to_sparse(table) if is_sparse_table(table) else table_to_tensor(table)
