"""The writer process of a compiled recording: builds rows from raw launches and writes them, off the program.

Started by :class:`tilelens.core.compiled.writer.process.ProcessWriter` as ``python -m tilelens.core.compiled.writer.child`` (a
fresh interpreter, never a fork of a process holding CUDA, and never re-importing the user's ``__main__``).
It reads framed messages from stdin and answers flushes on stdout. Messages are lists of items:

* ``("o", db_url, blobs_dir, run_id, next_seq)``: a recording begins (one process serves a program's
  recordings one after the other);
* ``("k", number, identity fields, params)``: a kernel, once, before its first launch (:func:`kernel_item`);
* ``("l", n, number, raw)``: launch ``n`` (the recording's n-th queued launch) of kernel ``number``, a
  :data:`~tilelens.core.compiled.rows.RawLaunch`; it arrives marshalled on its own (bytes inside the message),
  as the program's thread marshalled it;
* ``("t", template, number, body)``: a template of kernel ``number`` (``compiled_templates.body_of``), once,
  before its first launch;
* ``("m", n, template, started, duration, grid, values)``: launch ``n``, templated
  (``compiled_templates.expand``); marshalled on its own like ``"l"``;
* ``("e", event fields, n or None)``: an autotune event (:func:`event_item`), for launch ``n`` when it made one;
* ``("q", next_seq)``: the recording wrote launches itself; continue numbering at ``next_seq``;
* ``("f",)``: a flush: answer with :meth:`RawWriter.report` once everything before it is written;
* ``("x",)``: the recording ends: write, answer.

End of input without ``("x",)`` (the program died) still writes everything received, then exits: a crash of
the program loses only the launches it had not sent yet. SIGINT/SIGTERM are ignored here: a Ctrl-C reaches the
whole process group, and the recording, draining on its way out, needs this process until the end.

The frames are ``marshal`` data exchanged between TileLens's two processes of one recording: plain values only
(numbers, text, bytes, tuples, lists, dicts, None), so reading one builds no object of any class and runs no
code; nothing is stored in this form. The program sends its queue as a parts frame (:func:`frame_parts`): the
same list, each bytes item as it is and each other item marshalled on its own, so its feeder hands the pipe
the items' own buffers instead of copying them into one marshalled list while it holds the program's GIL.
:class:`RawWriter` is also what the recording falls back to in its own process if this one dies.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import marshal
import os
import signal
import struct
import sys
from typing import IO, Any

from tilelens.core.compiled.rows import build_launch
from tilelens.core.compiled.templates import expand
from tilelens.core.kernel.arguments import Param
from tilelens.records import AutotuneEvent, KernelIdentity, LaunchRecord

HEADER = struct.Struct("<Q")
# A frame's header is its body's size; with PARTS set the body is a list of parts (:func:`frame_parts`), each
# PART (its size, MARSHALLED set for an item marshalled on its own, clear for a bytes item as it is) and
# its bytes. Without it the body is one marshalled message.
PARTS = 1 << 63
PART = struct.Struct("<Q")
MARSHALLED = 1 << 63
_SIZE = (1 << 63) - 1


def read_frame(stream: IO[bytes]) -> Any | None:
    """One message, or None at the end of the stream."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (size,) = HEADER.unpack(head)
    body = stream.read(size & _SIZE)
    if len(body) < size & _SIZE:
        return None
    return _parts(body) if size & PARTS else marshal.loads(body)


def _parts(body: bytes) -> list[Any]:
    """A parts frame's items, in order (:func:`frame_parts`)."""
    items: list[Any] = []
    at, end = 0, len(body)
    while at < end:
        (head,) = PART.unpack_from(body, at)
        at += PART.size
        size = head & _SIZE
        if at + size > end:
            raise ValueError(f"a part of {size} bytes runs past its frame's {end}")
        data = body[at : at + size]
        items.append(marshal.loads(data) if head & MARSHALLED else data)
        at += size
    return items


def kernel_item(number: int, identity: KernelIdentity, params: list[Param]) -> tuple[Any, ...]:
    """The ``"k"`` message in plain values. A parameter's default is left out: rows are built from bound values."""
    fields = tuple(getattr(identity, f.name) for f in dataclasses.fields(identity))
    return ("k", number, fields, tuple((p.position, p.name, p.constexpr, p.triton_type) for p in params))


def event_item(event: AutotuneEvent, launch: int | None) -> tuple[Any, ...]:
    """The ``"e"`` message in plain values (the event's kernel as in :func:`kernel_item`, its time as text)."""
    kernel = tuple(getattr(event.kernel, f.name) for f in dataclasses.fields(event.kernel))
    body = (kernel, event.tuning_key, event.configs, event.chosen, event.timings, event.cache_hit)
    return ("e", body + (event.created_at.isoformat(),), launch)


def _kernel(item: tuple[Any, ...]) -> tuple[KernelIdentity, list[Param]]:
    params = [Param(pos, name, constexpr, None, tt) for pos, name, constexpr, tt in item[3]]
    return KernelIdentity(*item[2]), params


def _event(body: tuple[Any, ...]) -> AutotuneEvent:
    kernel, key, configs, chosen, timings, cache_hit, created = body
    return AutotuneEvent(
        KernelIdentity(*kernel), key, configs, chosen, timings, cache_hit, _dt.datetime.fromisoformat(created)
    )


def frame(message: Any) -> bytes:
    body = marshal.dumps(message)
    return HEADER.pack(len(body)) + body


def frame_parts(items: list[Any]) -> tuple[list[bytes], list[tuple[Any, Exception]]]:
    """``items`` as one parts frame, which :func:`read_frame` reads as the list of them: the buffers to write
    in order (a bytes item is one of them as it is: nothing is copied), and the items marshal refused with
    why (left out of the frame; the caller counts them)."""
    out: list[bytes] = [b""]
    refused: list[tuple[Any, Exception]] = []
    size = 0
    pack = PART.pack
    for item in items:
        if type(item) is bytes:
            out += (pack(len(item)), item)
            size += PART.size + len(item)
            continue
        try:
            body = marshal.dumps(item)
        except Exception as exc:  # noqa: BLE001 - a value marshal cannot take: that item is refused
            refused.append((item, exc))
            continue
        out += (pack(len(body) | MARSHALLED), body)
        size += PART.size + len(body)
    out[0] = HEADER.pack(size | PARTS)
    return out, refused


class RawWriter:
    """Writes raw launches and events into ``history``'s run ``run_id``, batch by batch, in order.

    A batch that fails is counted (``failed``, ``failure``) and the next one is tried; nothing raises.
    ``report`` returns what was written since the last report, for the recording's counters.
    """

    def __init__(self, history: Any, run_id: int, next_seq: int) -> None:
        self.history = history
        self.run_id = run_id
        self.next_seq = next_seq
        self.kernels: dict[int, tuple[Any, Any]] = {}
        self.templates: dict[int, tuple[int, tuple[Any, ...]]] = {}  # number -> (kernel number, body)
        # number -> the rows of its first written launch (``store.templated_rows``); None: not on this store.
        self.rows: dict[int, Any] = {}
        self.about: dict[int, tuple[str, bool]] = {}  # template -> (kernel name, has a tensor: unsnapshotted)
        self.ids: dict[int, int] = {}  # launch number -> row id, for the autotune events that name a launch
        self.written: list[tuple[int, str, str, bool]] = []  # (id, kernel name, status, unsnapshotted)
        self.events = 0
        self.from_templates = 0  # launches written from their template's rows (``_write_fast``), for reports
        self.failed = 0
        self.failure: str | None = None

    def handle(self, items: list[tuple[Any, ...]]) -> None:
        # Launches in order: (n, record) for a raw launch, (n, None, item) for a templated one (its record is
        # built only if it is written the usual way).
        launches: list[Any] = []
        for item in items:
            tag = item[0]
            if tag == "l":
                try:
                    identity, params = self.kernels[item[2]]
                    launches.append((item[1], build_launch(identity, params, item[3])))
                except Exception as exc:  # noqa: BLE001 - counted and reported by the recording
                    self._fail(exc, 1)
                continue
            if tag == "m":
                if item[2] in self.templates:
                    launches.append((item[1], None, item))
                else:
                    self._fail(KeyError(f"template {item[2]}"), 1)
                continue
            if tag == "t":  # a template: no write needed before it
                self.templates[item[1]] = (item[2], item[3])
                self.about.pop(item[1], None)
                continue
            self._write(launches)
            launches = []
            if tag == "k":
                self.kernels[item[1]] = _kernel(item)
            elif tag == "e":
                try:
                    launch_id = None if item[2] is None else self.ids.get(item[2])
                    self.history.write_autotune_event(self.run_id, _event(item[1]), launch_id)
                    self.events += 1
                except Exception as exc:  # noqa: BLE001
                    self._fail(exc, 0)
            elif tag == "q":
                self.next_seq = item[1]
        self._write(launches)

    def _write(self, launches: list[Any]) -> None:
        """Templated launches whose template's rows are known go in runs through ``templated_rows``; the
        rest, in between, the usual way; launch order and seqs as they came."""
        fast: list[Any] = []
        slow: list[Any] = []
        rows = self.rows
        for entry in launches:
            if len(entry) == 3 and rows.get(entry[2][2]) is not None:
                if slow:
                    self._write_records(slow)
                    slow = []
                fast.append(entry)
            else:
                if fast:
                    self._write_fast(fast)
                    fast = []
                slow.append(entry)
        if slow:
            self._write_records(slow)
        if fast:
            self._write_fast(fast)

    def _write_fast(self, entries: list[Any]) -> None:
        from tilelens.store.write.rowsql import Fallback
        from tilelens.store.write.templated_rows import write_templated

        batch = []
        for i, (_n, _none, item) in enumerate(entries):
            batch.append((self.rows[item[2]], self.next_seq + i, item[5], item[3], item[4], item[6]))
        try:
            ids = write_templated(self.history, batch)
        except Fallback:  # a refused row (a taken seq): the usual way decides, as it always did
            self._write_records(entries)
            return
        except Exception as exc:  # noqa: BLE001
            self._fail(exc, len(entries))
            return
        self.next_seq += len(entries)
        self.from_templates += len(entries)
        about = self.about
        for (n, _none, item), launch_id in zip(entries, ids):
            self.ids[n] = launch_id
            known = about.get(item[2])
            if known is None:
                number, body = self.templates[item[2]]
                known = about[item[2]] = (self.kernels[number][0].name, any(t for _i, t in body[1]))
            self.written.append((launch_id, known[0], "ok", known[1]))

    def _write_records(self, entries: list[Any]) -> None:
        pairs: list[tuple[Any, tuple[int, LaunchRecord]]] = []
        for entry in entries:
            if len(entry) == 2:
                pairs.append((entry, entry))
                continue
            item = entry[2]
            try:
                number, body = self.templates[item[2]]
                identity, params = self.kernels[number]
                raw = expand(body, item[3], item[4], item[5], item[6])
                pairs.append((entry, (item[1], build_launch(identity, params, raw))))
            except Exception as exc:  # noqa: BLE001 - counted and reported by the recording
                self._fail(exc, 1)
        written = len(self.written)
        self._write_built([launch for _entry, launch in pairs])
        if len(self.written) - written != len(pairs):  # the batch failed: nothing to learn from
            return
        for entry, (_n, rec) in pairs:
            if len(entry) == 3 and entry[2][2] not in self.rows:
                self._learn_rows(entry[2][2], rec)

    def _learn_rows(self, template: int, rec: LaunchRecord) -> None:
        """The template's rows from its first written launch (None where the store has no such path)."""
        from tilelens.core.kernel.arguments import jsonable
        from tilelens.store.write.templated_rows import row_template

        try:
            self.rows[template] = row_template(
                self.history, self.run_id, rec, self.templates[template][1][1], jsonable
            )
        except Exception:  # noqa: BLE001 - the usual way stays for this template
            self.rows[template] = None

    def _write_built(self, launches: list[tuple[int, LaunchRecord]]) -> None:
        if not launches:
            return
        recs = [rec for _n, rec in launches]
        for i, rec in enumerate(recs):
            rec.seq = self.next_seq + i
        try:
            ids = list(self.history.write_launches(self.run_id, recs))
        except Exception as exc:  # noqa: BLE001
            self._fail(exc, len(recs))
            return
        self.next_seq = max(self.next_seq + len(recs), recs[-1].seq + 1)
        for (n, rec), launch_id in zip(launches, ids):
            self.ids[n] = launch_id
            unsnapshotted = any(a.kind == "tensor" and a.before is None for a in rec.args)
            self.written.append((launch_id, rec.kernel.name, rec.status, unsnapshotted))

    def _fail(self, exc: BaseException, launches: int) -> None:
        self.failed += launches
        if self.failure is None:
            self.failure = f"{type(exc).__name__}: {exc}"

    def report(self) -> dict[str, Any]:
        out = {
            "written": self.written,
            "events": self.events,
            "failed": self.failed,
            "failure": self.failure,
            "next_seq": self.next_seq,
            "from_templates": self.from_templates,
        }
        self.written, self.events, self.failed, self.failure = [], 0, 0, None
        self.from_templates = 0
        return out


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stdin = sys.stdin.buffer
    # Reports go to the pipe on fd 1; anything else this process might print (a library's warning) goes to
    # stderr, so no stray byte can corrupt a frame.
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from pathlib import Path

    from tilelens.config import Location
    from tilelens.store import History

    opened: dict[tuple[str, str], Any] = {}
    writer: RawWriter | None = None
    try:
        while True:
            message = read_frame(stdin)
            if message is None:  # the program is gone: what arrived was written; this process ends
                return 0
            message = [marshal.loads(item) if type(item) is bytes else item for item in message]
            start = 0
            for i, item in enumerate(message):
                if item[0] not in ("o", "f", "x"):
                    continue
                if writer is not None:
                    writer.handle(message[start:i])
                start = i + 1
                if item[0] == "o":  # a recording begins: its history (kept open for the next ones) and run
                    where = (item[1], item[2])
                    if where not in opened:
                        opened[where] = History.open(location=Location(item[1], Path(item[2])))
                    writer = RawWriter(opened[where], item[3], item[4])
                    continue
                assert writer is not None
                stdout.write(frame(writer.report()))
                stdout.flush()
                if item[0] == "x":
                    writer = None
            if writer is not None:
                writer.handle(message[start:])
    finally:
        for history in opened.values():
            history.close()


if __name__ == "__main__":
    sys.exit(main())
