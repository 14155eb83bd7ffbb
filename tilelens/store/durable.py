"""Making a launch's new blob files durable together, before its rows are written.

Each blob appears atomically and durably: written to a temp file in its folder, the file fsync'd, renamed onto
its name, the folder fsync'd (:mod:`tilelens.store.blobs`). One launch usually adds several blobs (inputs it saw
for the first time, outputs, its trace), each in another folder, and doing those steps blob by blob costs two
fsyncs in a row per blob: on a busy disk, most of a small launch's recording time. A :class:`Batch` keeps the
order per blob but overlaps the waits across blobs: every temp file is written, then all are fsync'd at once
(one thread each, joined: the file system commits concurrent fsyncs together), renamed, and their folders fsync'd at once. The
guarantee is unchanged: when ``close`` returns, every blob of the batch is on disk under its name, durably, and
no row names it before (``History.write_launch`` writes rows after the batch closes).

Invariants: a temp file is renamed only after its own fsync returned; a folder is fsync'd after every rename
into it; on any failure no blob of the batch is renamed into place that was not fsync'd, and the temp files
left are removed.
"""

from __future__ import annotations

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


class Batch:
    """New blob files of one launch: ``add`` writes each to a temp file, ``close`` makes them all durable."""

    def __init__(self) -> None:
        self._pending: dict[Path, Path] = {}  # final path -> temp file
        self._folders: set[Path] = set()  # folders to fsync after the renames (new subfolders' parents too)

    def __contains__(self, path: Path) -> bool:
        return path in self._pending

    def add(self, path: Path, data: memoryview) -> None:
        folder = path.parent
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            self._folders.add(folder.parent)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._pending[path] = Path(tmp)
        self._folders.add(folder)

    def close(self) -> None:
        """fsync every temp file, rename each onto its name (read-only), fsync every folder touched."""
        try:
            _each(fsync_path, self._pending.values())
            for path, tmp in list(self._pending.items()):
                os.chmod(tmp, 0o444)  # a blob is immutable by construction
                os.replace(tmp, path)
                del self._pending[path]
            _each(fsync_path, sorted(self._folders, key=lambda p: len(p.parts), reverse=True))
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove the temp files not renamed (a failure): nothing of them was ever named."""
        for tmp in self._pending.values():
            tmp.unlink(missing_ok=True)
        self._pending.clear()
        self._folders.clear()
