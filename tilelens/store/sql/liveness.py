"""Whether the process that recorded a run still lives: how a run that nobody will finish is told apart.

A run is ``running`` from ``begin_run`` until its process writes how it ended. SIGKILL, ``os._exit`` or a
power cut end the process without that write, and the run would stay ``running`` forever. So each run stores
who recorded it: ``host``, ``pid``, and on Linux the process's start time (``/proc/<pid>/stat`` field 22,
clock ticks since boot), the kernel's boot id and the pid namespace. A later TileLens on the same host, in
the same pid namespace, can then decide exactly:

* another boot id: the machine rebooted since, the process is gone;
* no ``/proc/<pid>``, a zombie, or a process with another start time (the pid was reused): gone;
* the same pid and start time: alive.

Runs of other hosts or other pid namespaces (containers) are never judged: their processes cannot be seen
from here. Without ``/proc`` (macOS) only "is there a process with this pid" can be asked, so pid reuse
goes unnoticed there. Runs written before schema 0004 have only host and pid: they are judged lost only when
no process has their pid.

A run whose process is gone reads ``lost`` at once, in every read of the history, SQL included
(:mod:`tilelens.store.sql.runstatus` applies this rule there), and is stored as ``lost`` by the next TileLens
that opens the history for writing (``History.repair_lost_runs``). A wrong ``lost`` cannot
stick: a process that is in fact alive overwrites it when it finishes its run.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Literal

LOST = "lost"
RUNNING = "running"
Liveness = Literal["alive", "gone", "unknown"]

_PROC = "/proc"
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class ProcessIdentity:
    """Who a process is, as precisely as this system can say (None: not available here)."""

    host: str
    pid: int
    start: int | None  # /proc/<pid>/stat starttime, clock ticks since boot
    boot_id: str | None
    pid_ns: str | None  # e.g. "pid:[4026531836]"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, starttime) of a process, or None when there is no such process (or no /proc)."""
    text = _read(f"{_PROC}/{pid}/stat")
    if not text:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces and parentheses.
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[19])  # fields 3 (state) and 22 (starttime)
    except (IndexError, ValueError):
        return None


def _pid_ns() -> str | None:
    try:
        return os.readlink(f"{_PROC}/self/ns/pid")
    except OSError:
        return None


def current_process() -> ProcessIdentity:
    """This process. Read afresh each time: a forked child is another process."""
    pid = os.getpid()
    stat = _stat(pid)
    return ProcessIdentity(
        host=socket.gethostname(),
        pid=pid,
        start=stat[1] if stat is not None else None,
        boot_id=_read(_BOOT_ID),
        pid_ns=_pid_ns(),
    )


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    except (OSError, OverflowError, ValueError):
        return True  # cannot tell: never call a run lost on a guess
    return True


def liveness(recorded: ProcessIdentity, here: ProcessIdentity | None = None) -> Liveness:
    """Whether the process ``recorded`` describes is still alive, as seen from ``here`` (this process).

    ``unknown`` when it cannot be seen from here: another host, another pid namespace.
    """
    here = here or current_process()
    if recorded.host != here.host or recorded.pid <= 0:
        return "unknown"
    if recorded.boot_id is not None and here.boot_id is not None and recorded.boot_id != here.boot_id:
        return "gone"  # rebooted since: every process of that boot has ended
    if recorded.pid_ns != here.pid_ns and recorded.pid_ns is not None:
        return "unknown"
    if here.start is None:  # no /proc: only ask whether the pid exists
        return "alive" if _pid_exists(recorded.pid) else "gone"
    stat = _stat(recorded.pid)
    if stat is None:
        return "gone"
    state, start = stat
    if state in ("Z", "X"):  # exited, not yet reaped by its parent
        return "gone"
    if recorded.start is not None and start != recorded.start:
        return "gone"  # the pid now belongs to another process
    if recorded.start is None:
        return "unknown"  # a run from before 0004: a process with that pid may or may not be the recorder
    return "alive"


def effective_status(
    status: str,
    host: str,
    pid: int | None,
    pid_start: int | None,
    boot_id: str | None,
    pid_ns: str | None,
    here: ProcessIdentity | None = None,
) -> str:
    """``lost`` for a ``running`` run whose process is gone; any other status as stored."""
    if status != RUNNING or pid is None:
        return status
    recorded = ProcessIdentity(host=host, pid=int(pid), start=pid_start, boot_id=boot_id, pid_ns=pid_ns)
    return LOST if liveness(recorded, here) == "gone" else status
