"""Where an output file's bytes go, without ever changing what the named path is.

``tilelens export -o PATH`` used to write a temp file and rename it over PATH, which turned a symlink, a FIFO or
a device node into a regular file. The rule now (:func:`open_output`):

- ``-`` is standard output (the process's fd 1, flushed, never closed);
- a path that is, or whose symlinks lead to, one of this process's file descriptors (``/dev/stdout``,
  ``/dev/fd/N``, ``/proc/self/fd/N``) is written through a duplicate of that descriptor, so the shell's
  redirection (``>``, ``>>``) decides where the bytes land, as it would for any program;
- anything else that exists and is not a regular file (a FIFO, a character or block device) is opened and
  written through; it is never replaced;
- a regular file, or a name that does not exist yet, is written atomically: a temp file beside it (created
  exclusively, never following a symlink), fsync'd, then renamed over it. For a symlink the rename lands on the
  link's final target, so the link stays a link. An existing file keeps its permission bits; one without any
  write bit (``chmod 444``) is refused, not replaced.

Write errors (``/dev/full``, a closed pipe) surface as ``OSError`` and leave the destination as it was (for a
regular file) or as far as the stream got (for anything written through).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from tilelens.errors import UsageError

if TYPE_CHECKING:
    import pyarrow as pa

STDOUT = "-"
MAX_LINKS = 40  # as the kernel's ELOOP limit
_OWN_FD = re.compile(r"^/(?:proc/(?:self|thread-self|(?P<pid>\d+))|dev)/fd/(?P<fd>\d+)$")


def describe(path: str | Path) -> str:
    """How a destination reads in a message: ``-`` is standard output."""
    return "standard output" if str(path) == STDOUT else str(path)


@contextlib.contextmanager
def open_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content to; the content is in place when the block ends.

    On an exception inside the block an atomic destination is left untouched (the temp file is removed).
    """
    text = os.fspath(path)
    if text == STDOUT:
        sys.stdout.flush()  # what was printed before comes first
        try:
            yield sys.stdout.buffer
            sys.stdout.buffer.flush()
        except BrokenPipeError:
            _quiet_stdout()
            raise
        return
    how, where = _destination(text)
    if how == "fd":
        assert isinstance(where, int)
        with _through_fd(where) as f:
            yield f
    elif how == "through":
        with open(where, "wb") as f:  # O_TRUNC means nothing to a FIFO or a device
            yield f
    else:
        with _atomic(str(where)) as f:
            yield f


def _destination(path: str) -> tuple[str, int | str]:
    """("fd", N), ("through", path) or ("atomic", final path), following symlinks one hop at a time."""
    current = path
    for _ in range(MAX_LINKS):
        own = _OWN_FD.match(os.path.normpath(os.path.abspath(current)))
        if own is not None and (own["pid"] is None or int(own["pid"]) == os.getpid()):
            return "fd", int(own["fd"])
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return "atomic", current  # a new file (through a dangling link: its target, as open() would)
        if stat.S_ISLNK(st.st_mode):
            # A relative link is relative to the folder holding it.
            current = os.path.join(os.path.dirname(current), os.readlink(current))
            continue
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        return ("atomic" if stat.S_ISREG(st.st_mode) else "through"), current
    raise OSError(errno.ELOOP, "too many levels of symbolic links", path)


@contextlib.contextmanager
def _through_fd(fd: int) -> Iterator[BinaryIO]:
    if fd == 1:
        sys.stdout.flush()
    try:
        with os.fdopen(os.dup(fd), "wb") as f:
            yield f
    except BrokenPipeError:
        if fd == 1:
            _quiet_stdout()
        raise


def _quiet_stdout() -> None:
    """The reader left (``| head``): point fd 1 at /dev/null so Python's flush of stdout at exit does not fail
    a second time with a traceback; the error itself is still reported."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


@contextlib.contextmanager
def _atomic(target: str) -> Iterator[BinaryIO]:
    folder, name = os.path.split(target)
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None
    if mode is not None and not mode & 0o222:
        # Read-only (chmod 444): a write to it would fail, and a rename over it must not succeed where the
        # write would not (root may do either; a read-only file says its owner wants it kept).
        raise UsageError(f"{target} is read-only; remove it or make it writable (chmod u+w) to replace it")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for attempt in range(100):
        # Shortened: a target name near the 255-byte limit must not fail for want of room for the suffix.
        tmp = os.path.join(folder, f".{name[:100]}.{os.getpid()}.{attempt}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)  # the umask applies, as to any new file
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(errno.EEXIST, "no free temp file name beside", target)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):  # the failure being reported may be the file system's
            Path(tmp).unlink(missing_ok=True)
        raise


def write_lanes(batches: Iterator[pa.RecordBatch], path: str | Path, format: str) -> int:
    """Write lane batches (``tilelens.store.files.lanes.LANE_SCHEMA``) as Parquet or CSV by :func:`open_output`'s
    rules; returns the rows written. A write error is one :class:`UsageError`; a closed pipe stays a
    ``BrokenPipeError`` for the caller (``| head`` is no failure)."""
    from tilelens.store.files import lanes

    rows = 0
    try:
        with open_output(path) as sink:
            if format == "parquet":
                import pyarrow.parquet as pq

                with pq.ParquetWriter(sink, lanes.LANE_SCHEMA, compression="zstd") as writer:
                    for batch in batches:
                        writer.write_batch(batch)
                        rows += batch.num_rows
            else:
                import pyarrow.csv as pcsv

                with pcsv.CSVWriter(sink, lanes.LANE_SCHEMA) as writer:
                    for batch in batches:
                        writer.write_batch(batch)
                        rows += batch.num_rows
    except BrokenPipeError:
        raise
    except OSError as exc:  # no permission, no space (/dev/full), a name too long
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return rows
