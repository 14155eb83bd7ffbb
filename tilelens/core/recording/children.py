"""Following child processes: every Python process a recorded program starts records into the same history.

How a child is reached, the way coverage.py measures subprocesses:

* **Started children** (``subprocess`` running python, ``multiprocessing`` spawn and forkserver, pytest-xdist
  workers): a recording that follows children puts :data:`ENV` in the environment (JSON: history, parent run,
  tag, options). Every Python process runs the start-up hook at interpreter start: the ``tilelens_startup.pth``
  file the package installs into site-packages (:data:`HOOK_LINE`, one line that only reads ``os.environ``
  when the variable is unset), or, where that file is not installed (an editable install, a source tree on
  ``PYTHONPATH``), the ``sitecustomize`` in ``tilelens/core/recording/_hook`` that the recording puts first on the
  children's ``PYTHONPATH`` and that chains to any other ``sitecustomize``. The hook calls :func:`start`.
* **Forked children** (``os.fork``, ``multiprocessing`` fork, and the children of a forkserver): they inherit
  the parent's recording, patches installed. An at-fork hook turns it into the child's own
  (``Recording.become_child``) before the child runs anything else.

Invariants: a child's launches go to a run of its own (``parent_run_id`` = the run of the nearest recorded
ancestor, ``pid`` its own), never to its parent's; a child run is begun by the child's first launch, so a
child that launches nothing (a forkserver, a ``python -c 'print(1)'``) leaves no run; a child that cannot
open the history prints one line and runs unrecorded; ``TILELENS_DISABLE=1`` in a child's environment leaves
it unrecorded. The child's recording starts only once Triton is imported, so a child that never imports it
pays nothing but this module's import.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import site
import sys
from pathlib import Path
from typing import Any

ENV = "TILELENS_FOLLOW"
DISABLE = "TILELENS_DISABLE"
HOOK_PTH = "tilelens_startup.pth"
#: The .pth line: site executes lines starting with "import"; with ENV unset this is one dict look-up.
HOOK_LINE = (
    "import os; os.environ.get('TILELENS_FOLLOW') and "
    "__import__('tilelens.core.recording.child', fromlist=['start']).start()\n"
)
FALLBACK_DIR = Path(__file__).with_name("_hook")

_state: dict[str, Any] = {"fork_hook": False, "saved_env": None}


def disabled(env: Any = None) -> bool:
    value = (os.environ if env is None else env).get(DISABLE, "")
    return value.strip().lower() not in ("", "0", "false", "no")


# -- the parent side --------------------------------------------------------------------------------------


def attach(rec: Any) -> None:
    """Called when a recording starts: forks are handled from now on; started children follow if asked."""
    if not _state["fork_hook"] and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
        _state["fork_hook"] = True
    if rec.follow_children and _state["saved_env"] is None:
        _state["saved_env"] = {k: os.environ.get(k) for k in (ENV, "PYTHONPATH")}
        _advertise(rec, rec.run_id)
        if not hook_installed():
            path = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = str(FALLBACK_DIR) + (os.pathsep + path if path else "")


def detach(rec: Any) -> None:
    """Called when a recording ends: the environment is as it was before :func:`attach`."""
    saved = _state["saved_env"]
    if not rec.follow_children or saved is None:
        return
    _state["saved_env"] = None
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def options_changed(rec: Any) -> None:
    """The recording's options changed after it started (``pytest --tilelens-coverage`` under ``tilelens record``
    turns coverage on): children started from now on record as it now does."""
    if rec.follow_children and _state["saved_env"] is not None:
        _advertise(rec, rec.run_id)


def run_started(rec: Any) -> None:
    """A run was begun: children started from now on link to it; a child's run is finished at its exit."""
    if rec.follow_children and _state["saved_env"] is not None:
        _advertise(rec, rec.run_id)
    if rec.parent_run_id is not None:
        atexit.register(_finish_quietly, rec)
        mp_util = sys.modules.get("multiprocessing.util")
        if mp_util is not None:  # multiprocessing's children leave through os._exit after its finalizers
            mp_util.Finalize(None, _finish_quietly, args=(rec,), exitpriority=0)


def _advertise(rec: Any, run_id: int | None) -> None:
    location = rec.history.location
    spec = {
        "db": location.db_url,
        "blobs": str(location.blobs_dir),
        "run": run_id if run_id is not None else rec.parent_run_id,
        "tag": rec.tag,
        "autotune": rec.autotune_policy,
    }
    spec["on_oob"] = rec.on_oob
    if getattr(rec, "coverage", False):  # a child records executed lines as its parent does
        spec["coverage"] = True
    if rec.backend == "compiled":  # a spawned child records as its parent does
        policy = rec.snapshot_policy
        spec.update(backend="compiled", snapshots=policy.mode, snapshot_kernels=list(policy.kernels))
        spec["snapshot_budget"] = policy.budget_bytes
    os.environ[ENV] = json.dumps(spec)


def hook_installed() -> bool:
    """Whether this interpreter's site directories hold the start-up ``.pth`` (a wheel install does)."""
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return any(os.path.exists(os.path.join(d, HOOK_PTH)) for d in dirs)


def _before_fork() -> None:
    """In the parent, just before ``fork()``: close the history's idle connections.

    SQLite keeps per-file lock bookkeeping in process memory; a child forked while the parent holds an open
    connection inherits that bookkeeping but not the POSIX locks behind it, so the child's own, new connection
    believes it holds locks it does not. Once the parent closed its last connection it could then checkpoint
    and delete the write-ahead log under the child, whose later commits were lost. With no connection open at
    the fork the child starts clean; the parent reopens one on its next write (a millisecond). Connections
    checked out by another thread at that instant stay open (they are that thread's; rare).
    """
    from tilelens.core import session

    history = getattr(session.active(), "history", None)  # a Recording's; other sinks hold none
    if history is not None:
        with contextlib.suppress(Exception):  # never let the user's fork fail because of the history
            history.engine.dispose()


def _after_fork_in_child() -> None:
    from tilelens.core import session

    rec = session.active()
    if rec is not None and hasattr(rec, "become_child"):
        rec.become_child()


def _finish_quietly(rec: Any) -> None:
    with contextlib.suppress(Exception):  # at exit: a history that went away must not print a traceback
        rec.finish("ok", None)
