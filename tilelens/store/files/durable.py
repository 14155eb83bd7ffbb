"""Making a launch's new blob files durable together, before its rows are written.

Each blob appears atomically and durably: written to a temp file in its folder, the file fsync'd, renamed onto
its name, the folder fsync'd (:mod:`tilelens.store.files.blobs`). One launch usually adds several blobs (inputs it saw
for the first time, outputs, its trace), each in another folder, and doing those steps blob by blob costs two
fsyncs in a row per blob: on a busy disk, most of a small launch's recording time. A :class:`Batch` keeps the
order per blob but overlaps the waits across blobs and with the launch's other work: each temp file's fsync
starts on its own thread as soon as the file is written (the file system commits concurrent fsyncs together),
and at ``close``, once all have returned, the files are renamed and their folders fsync'd at once. The
guarantee is unchanged: when ``close`` returns, every blob of the batch is on disk under its name, durably, and
no row names it before (``History.write_launch`` writes rows after the batch closes).

Invariants: a temp file is renamed only after its own fsync returned; a folder is fsync'd after every rename
into it; on any failure no blob of the batch is renamed into place that was not fsync'd, and the temp files
left are removed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _each(fn: Callable[[Path], None], paths: Iterable[Path]) -> None:
    """``fn`` on every path, concurrently when there are several; the first error is raised after all ran.

    Plain threads, joined before returning: no thread outlives a batch (a pool's idle threads would make every
    later ``fork`` of the user's program a fork of a multi-threaded process).
    """
    todo = list(paths)
    errors: list[BaseException] = []

    def run(p: Path) -> None:
        try:
            fn(p)
        except BaseException as exc:  # re-raised on the calling thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(p,), name="tilelens-fsync") for p in todo[1:]]
    for t in threads:
        t.start()
    if todo:
        run(todo[0])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _write_temp(path: Path, data: memoryview) -> tuple[Path, Path | None]:
    """Write ``data`` to a new temp file beside ``path`` (not fsync'd, not named yet); also the folder whose
    entry must be fsync'd when ``path``'s folder had to be made (its parent), else None."""
    folder = path.parent
    new_folder = None
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        new_folder = folder.parent
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name[:16]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp), new_folder


class _Syncing:
    """One temp file's fsync, started on its own thread as soon as the file is written (``add``), so that
    it runs while the launch's other blobs are encoded and its rows built; ``wait`` joins it."""

    def __init__(self, tmp: Path) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(tmp,), name="tilelens-fsync")
        self._thread.start()

    def _run(self, tmp: Path) -> None:
        try:
            fsync_path(tmp)
        except BaseException as exc:  # re-raised on the batch's thread by ``wait``
            self.error = exc

    def wait(self) -> None:
        self._thread.join()
        if self.error is not None:
            raise self.error


class Batch:
    """New blob files of one launch: ``add`` writes each to a temp file and starts its fsync, ``close`` waits
    for them and makes them all durable under their names."""

    def __init__(self) -> None:
        self._pending: dict[Path, Path] = {}  # final path -> temp file
        self._syncing: dict[Path, _Syncing] = {}  # temp file -> its fsync in flight
        self._folders: set[Path] = set()  # folders to fsync after the renames (new subfolders' parents too)

    def __contains__(self, path: Path) -> bool:
        return path in self._pending

    def add(self, path: Path, data: memoryview) -> None:
        tmp, new_folder = _write_temp(path, data)
        if new_folder is not None:
            self._folders.add(new_folder)
        self._pending[path] = tmp
        self._folders.add(path.parent)
        self._syncing[tmp] = _Syncing(tmp)

    def _wait(self) -> None:
        """Join every fsync in flight; the first error is raised once all have ended."""
        syncing, self._syncing = list(self._syncing.values()), {}
        errors = []
        for job in syncing:
            try:
                job.wait()
            except BaseException as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Wait for every temp file's fsync, rename each onto its name (read-only), fsync every folder touched."""
        try:
            self._wait()
            for path, tmp in list(self._pending.items()):
                os.chmod(tmp, 0o444)  # a blob is immutable by construction
                os.replace(tmp, path)
                del self._pending[path]
            _each(fsync_path, sorted(self._folders, key=lambda p: len(p.parts), reverse=True))
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove the temp files not renamed (a failure): nothing of them was ever named."""
        with contextlib.suppress(BaseException):  # the failure being handled is the caller's to raise
            self._wait()  # no fsync thread outlives the batch
        for tmp in self._pending.values():
            tmp.unlink(missing_ok=True)
        self._pending.clear()
        self._folders.clear()


class EarlyBlob:
    """One new blob made durable under its name on a thread of its own, started before the launch that will
    name it has run (``BlobStore.store_early``): its fsyncs wait while the kernel is interpreted, not after.

    The steps of a batch, for one file: the temp file is written here, then on the thread fsync'd, renamed onto
    its name (read-only) and its folder fsync'd (and a new folder's parent). ``wait`` joins the thread and says
    whether every step succeeded; on a failure the temp file is removed (a file renamed into place before a
    failed folder fsync stays: the ordinary path then compares it with the bytes, as any file found on disk).
    """

    def __init__(self, path: Path, data: memoryview) -> None:
        self._tmp, self._new_folder = _write_temp(path, data)
        self.path = path
        self._ok = False
        self._thread = threading.Thread(target=self._run, name="tilelens-fsync")
        self._thread.start()

    def _run(self) -> None:
        try:
            fsync_path(self._tmp)
            os.chmod(self._tmp, 0o444)
            os.replace(self._tmp, self.path)
            fsync_path(self.path.parent)
            if self._new_folder is not None:
                fsync_path(self._new_folder)
            self._ok = True
        except BaseException:  # noqa: BLE001 - the blob is left to the ordinary path, which reports failures
            with contextlib.suppress(OSError):
                self._tmp.unlink(missing_ok=True)

    def wait(self) -> bool:
        self._thread.join()
        return self._ok
