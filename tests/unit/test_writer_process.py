"""The writer process of a compiled recording (``snapshots="none"``): rows, flushes, its death, the program's.

The compiled launch is the stand-in of ``test_compiled_recording`` (the kernel interpreted with compiled
semantics); the writer process is the real one (``python -m tilelens.core.compiled.writer.child``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from sqlalchemy import select

import tilelens
from tilelens.core.compiled.writer import process as writer_process
from tilelens.store import History
from tilelens.store.sql.models import Kernel, Launch, LaunchArg, Run

from .test_compiled_recording import StandIn, scale_kernel

ROOT = Path(__file__).resolve().parents[2]


def _launches(count: int) -> tuple[list[torch.Tensor], Any]:
    x = torch.arange(8, dtype=torch.float32)
    ys = [torch.zeros(8) for _ in range(count)]

    def body(start: int = 0, stop: int = count) -> None:
        for i in range(start, stop):
            scale_kernel[(1,)](x, ys[i], 8, float(i), BLOCK=8)

    return ys, body


def _rows(db: Path, blobs: Path) -> list[tuple[Any, ...]]:
    """Every launch of the history with its arguments, minus what differs between two runs (ids, times)."""
    with History.open(str(db), blobs) as h, h.session() as s:
        out = []
        for launch in s.execute(select(Launch).order_by(Launch.seq)).scalars():
            kernel = s.get(Kernel, launch.kernel_id)
            args = s.execute(
                select(LaunchArg).where(LaunchArg.launch_id == launch.id).order_by(LaunchArg.position)
            ).scalars()
            out.append(
                (
                    launch.seq,
                    kernel.qualname if kernel is not None else None,
                    launch.grid,
                    launch.status,
                    launch.backend,
                    launch.device,
                    launch.config,
                    launch.tuning_key,
                    [
                        (
                            a.position,
                            a.name,
                            a.kind,
                            a.dtype,
                            a.shape,
                            a.strides,
                            a.storage_group,
                            a.value,
                            a.value_type,
                            a.before_blob,
                        )
                        for a in args
                    ],
                )
            )
        return out


def test_the_writer_process_writes_exactly_the_rows_the_thread_writes(tmp_path: Path) -> None:
    recs = {}
    for kind in ("thread", "process"):
        ys, body = _launches(300)
        rec = tilelens.Recording(
            str(tmp_path / f"{kind}.db"),
            tmp_path / f"{kind}-b",
            backend="compiled",
            snapshots="none",
            runner=StandIn(),
            writer=kind,
        )
        with rec:
            body()
        assert [y[1].item() for y in ys] == [float(i) for i in range(300)]  # the outputs are the program's
        recs[kind] = rec
    assert isinstance(recs["process"]._writer, writer_process.ProcessWriter)
    thread_rows = _rows(tmp_path / "thread.db", tmp_path / "thread-b")
    process_rows = _rows(tmp_path / "process.db", tmp_path / "process-b")
    assert len(process_rows) == 300 and [r[0] for r in process_rows] == list(range(300))
    assert process_rows == thread_rows
    # The same launches recorded with snapshots (records described at launch time, on the program's thread):
    # the same rows apart from the snapshot blobs.
    ys, body = _launches(300)
    with tilelens.Recording(
        str(tmp_path / "all.db"), tmp_path / "all-b", backend="compiled", snapshots="all", runner=StandIn()
    ):
        body()
    described = [(*r[:-1], [a[:-1] for a in r[-1]]) for r in _rows(tmp_path / "all.db", tmp_path / "all-b")]
    assert described == [(*r[:-1], [a[:-1] for a in r[-1]]) for r in process_rows]
    rec = recs["process"]
    assert len(rec.launch_ids) == 300 and len(set(rec.launch_ids)) == 300
    assert rec.unsnapshotted == 300 and rec.launches_per_kernel == recs["thread"].launches_per_kernel
    assert sum(rec.launches_per_kernel.values()) == 300
    assert rec.write_failure is None


def test_flush_makes_the_rows_visible_and_the_end_of_the_block_drains_everything(tmp_path: Path) -> None:
    ys, body = _launches(120)
    db, blobs = tmp_path / "h.db", tmp_path / "b"
    rec = tilelens.Recording(str(db), blobs, backend="compiled", snapshots="none", runner=StandIn())
    with rec:
        body(0, 70)
        rec.flush()
        with History.open(str(db), blobs) as h, h.session() as s:
            assert s.scalar(select(Launch.id).where(Launch.seq == 69)) is not None
            assert s.scalar(select(Launch.id).where(Launch.seq == 70)) is None
        assert len(rec.launch_ids) == 70
        body(70, 120)
    with History.open(str(db), blobs) as h, h.session() as s:
        seqs = s.execute(select(Launch.seq).order_by(Launch.seq)).scalars().all()
        assert seqs == list(range(120))
        assert s.execute(select(Run.status)).scalar_one() == "ok"
    assert len(rec.launch_ids) == 120


def test_the_writer_process_dying_is_reported_and_later_launches_are_written_here(tmp_path: Path) -> None:
    ys, body = _launches(100)
    db, blobs = tmp_path / "h.db", tmp_path / "b"
    writer_process.stop_writer_process()  # a process of this test's own, so that killing it harms no other
    rec = tilelens.Recording(str(db), blobs, backend="compiled", snapshots="none", runner=StandIn())
    with rec:
        body(0, 40)
        rec.flush()  # 40 written by the process
        writer = rec._writer
        os.kill(writer.pid, signal.SIGKILL)
        writer._child.wait()
        body(40, 100)  # the program goes on as if nothing happened
    assert [y[1].item() for y in ys] == [float(i) for i in range(100)]
    assert rec.write_failure is not None and "writer process" in rec.write_failure
    assert f"pid {writer.pid}" in rec.write_failure
    with History.open(str(db), blobs) as h, h.session() as s:
        seqs = s.execute(select(Launch.seq).order_by(Launch.seq)).scalars().all()
    # The first 40 were confirmed; of the rest, those sent to the dead process before the program noticed
    # are lost (counted), every later one was written by the recording's own process.
    lost = rec._writer.failed_launches
    assert seqs[:40] == list(range(40)) and len(seqs) == 100 - lost
    # The process that took over knows the kernels (and templates) the dead one had been sent: only launches
    # in flight to the dead process are lost, never every later launch of an already seen kernel.
    assert lost < 60 and seqs[-1] >= 99 - lost
    assert len(set(seqs)) == len(seqs)
    assert len(rec.launch_ids) == 100 - lost
    assert writer_process._writer_process().pid != writer.pid  # the next recording gets a new one


PROGRAM = textwrap.dedent(
    """
    import os, sys, time, torch
    sys.path.insert(0, {tests!r})
    import tilelens
    from tilelens.core.compiled.writer import process as writer_process
    from unit.test_compiled_recording import StandIn, scale_kernel

    rec = tilelens.Recording({db!r}, {blobs!r}, backend="compiled", snapshots="none", runner=StandIn())
    rec.__enter__()
    x = torch.ones(8)
    for i in range(50):
        scale_kernel[(1,)](x, torch.zeros(8), 8, float(i), BLOCK=8)
    w = rec._writer
    while w._sent_upto < w.queued():  # everything handed to the writer process's pipe
        time.sleep(0.001)
    print(w.pid, flush=True)
    os._exit(3)  # a crash: no __exit__, no flush
    """
)


def test_a_crash_of_the_program_loses_only_what_it_had_not_sent(tmp_path: Path) -> None:
    db, blobs = tmp_path / "h.db", tmp_path / "b"
    script = tmp_path / "program.py"
    script.write_text(PROGRAM.format(tests=str(ROOT / "tests"), db=str(db), blobs=str(blobs)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 3, done.stderr
    child = int(done.stdout.split()[-1])
    # The writer process sees the end of its input, writes what it received and ends (waited for, up to a
    # minute: it was orphaned, so only its pid can be watched).
    for _ in range(6000):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    with History.open(str(db), blobs) as h, h.session() as s:
        seqs = s.execute(select(Launch.seq).order_by(Launch.seq)).scalars().all()
        status = s.execute(select(Run.status)).scalar_one()
    assert seqs == list(range(50))
    assert status == "lost"  # the program died without finishing its run


def test_kernel_and_autotune_messages_cross_as_plain_values_and_come_back_equal() -> None:
    import io

    from tilelens.core.compiled.writer import child as writer_child
    from tilelens.core.kernel.arguments import Param
    from tilelens.records import AutotuneEvent, KernelIdentity

    identity = KernelIdentity("m", "k", "/f.py", 3, "def k(): pass", "ab" * 32, "key", None)
    params = [Param(0, "x", False, None, "fp32"), Param(1, "BLOCK", True, None, None)]
    event = AutotuneEvent(
        identity, "(1024,)", [{"kwargs": {"B": 32}}], {"kwargs": {"B": 32}}, [[0.5, 0.25]], True
    )
    stream = io.BytesIO(
        writer_child.frame([writer_child.kernel_item(7, identity, params)])
        + writer_child.frame([writer_child.event_item(event, 3)])
    )
    (kernel,) = writer_child.read_frame(stream)
    (item,) = writer_child.read_frame(stream)
    assert kernel[1] == 7 and writer_child._kernel(kernel) == (identity, params)
    assert item[2] == 3 and writer_child._event(item[1]) == event
    assert writer_child.read_frame(stream) is None


def test_a_launch_marshal_refuses_is_counted_on_the_program_thread_and_the_rest_are_written(
    tmp_path: Path,
) -> None:
    """Launches are marshalled on the program's thread (the queue holds bytes): one whose raw values marshal
    refuses (here an option holding an object) is counted failed there, the launch itself ran, and the
    launches around it are written in order."""
    x = torch.arange(8, dtype=torch.float32)
    ys = [torch.zeros(8) for _ in range(3)]
    db, blobs = tmp_path / "h.db", tmp_path / "b"
    rec = tilelens.Recording(str(db), blobs, backend="compiled", snapshots="none", runner=StandIn())
    with rec:
        scale_kernel[(1,)](x, ys[0], 8, 1.0, BLOCK=8)
        scale_kernel[(1,)](x, ys[1], 8, 2.0, BLOCK=8, odd_option=object())
        scale_kernel[(1,)](x, ys[2], 8, 3.0, BLOCK=8)
    assert torch.equal(ys[1], x * 2.0)  # the program's launch ran
    assert isinstance(rec._writer, writer_process.ProcessWriter)
    assert rec._writer.failed_launches == 1 and rec.write_failure == "ValueError: unmarshallable object"
    rows = _rows(db, blobs)
    assert [(r[0], r[-1][3][7]) for r in rows] == [(0, 1.0), (1, 3.0)]
    assert len(rec.launch_ids) == 2


def test_the_writers_cpu_is_read_from_proc_and_grows_as_it_writes(tmp_path: Path) -> None:
    """``writer_cpu_seconds`` (the bench prints it per launch): the writer process's user and system time,
    read from ``/proc``, which writing launches raises; None once no writer process is alive."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc here")
    from .test_compiled_templates import _recording

    rec = _recording(tmp_path)
    with rec:
        x = torch.ones(8)
        scale_kernel[(1,)](x, torch.zeros(8), 8, 1.0, BLOCK=8)
        rec.flush()
        before = writer_process.writer_cpu_seconds()
        assert before is not None and before > 0  # its start alone takes CPU (a fresh interpreter)
        for i in range(1000):
            scale_kernel[(1,)](x, torch.zeros(8), 8, float(i), BLOCK=8)
        rec.flush()
        after = writer_process.writer_cpu_seconds()
    assert after is not None and after > before  # 1,000 launches written: more than one clock tick
    child = writer_process._shared
    assert child is not None
    again = writer_process.writer_cpu_seconds()
    stat = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")  # utime and stime, read after
    assert again is not None and after <= again <= ticks
    writer_process.stop_writer_process()
    assert writer_process.writer_cpu_seconds() is None
