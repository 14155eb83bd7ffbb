"""The child's side of following child processes (see :mod:`tilelens.core.recording.children`): the start-up
hook's :func:`start`, which records this process when its environment asks for it.

Invariants: a child that cannot open the history prints one line and runs unrecorded; ``TILELENS_DISABLE=1``
leaves it unrecorded; its recording starts only once Triton is imported, so a child that never imports it
pays nothing but this module's import.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.util
import json
import os
import sys
from typing import Any

from tilelens.core.recording.children import ENV, disabled

_child: dict[str, Any] = {"rec": None}


def start() -> None:
    """The start-up hook: record this process if its environment asks for it (see the module docstring)."""
    if _child["rec"] is not None or disabled():
        return
    try:
        spec = json.loads(os.environ[ENV])
        if not isinstance(spec, dict) or "db" not in spec:
            raise ValueError("not a TileLens child specification")
    except (KeyError, ValueError) as exc:
        _say(f"{ENV} is not usable ({exc})")
        return
    _child["rec"] = "pending"
    if "triton" in sys.modules:
        begin(spec)
    else:
        sys.meta_path.insert(0, _AfterTritonImport(spec))


def begin(spec: dict[str, Any]) -> None:
    """Start this child's recording now; any failure is one line on stderr and the program goes on."""
    try:
        from tilelens.core.recording.recording import Recording  # torch and Triton: only when a child records

        kwargs: dict[str, Any] = {}
        if spec.get("backend") == "compiled":
            kwargs.update(backend="compiled", snapshots=spec.get("snapshots") or "all")
            kwargs.update(snapshot_kernels=tuple(spec.get("snapshot_kernels") or ()))
            kwargs["snapshot_budget"] = spec.get("snapshot_budget")
        rec = Recording(
            spec["db"],
            spec.get("blobs"),
            tag=spec.get("tag"),
            autotune=spec.get("autotune") or "first",
            argv=[],
            parent_run_id=spec.get("run"),
            follow_children=True,
            lazy_run=True,
            on_oob=spec.get("on_oob"),
            coverage=bool(spec.get("coverage")),
            **kwargs,
        )
        _child["rec"] = rec
        rec.__enter__()
    except Exception as exc:  # noqa: BLE001 - never crash the user's worker
        _child["rec"] = None
        _say(f"not recorded: {exc}")
        return
    atexit.register(_end_child, rec)


def end() -> None:
    """End this child's recording now (an xdist worker's, at the end of its session); idempotent."""
    rec = _child["rec"]
    if rec is not None and rec != "pending":
        _end_child(rec)


def _end_child(rec: Any) -> None:
    if _child.get("ended") is rec:
        return
    _child["ended"] = rec
    with contextlib.suppress(Exception):
        rec.__exit__(None, None, None)


def _say(message: str) -> None:
    line = f"tilelens: process {os.getpid()}: {message}".replace("\n", " ")
    with contextlib.suppress(Exception):
        print(line, file=sys.stderr, flush=True)


class _AfterTritonImport(importlib.abc.MetaPathFinder):
    """Begins the child's recording right after ``import triton`` completes, and then leaves sys.meta_path.

    Importing torch and Triton costs seconds; a child that never uses Triton should not pay it.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "triton":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        found = importlib.util.find_spec(name)
        if found is None or found.loader is None:
            return found
        found.loader = _StartAfterLoad(found.loader, self.spec)
        return found


class _StartAfterLoad(importlib.abc.Loader):
    def __init__(self, loader: Any, spec: dict[str, Any]) -> None:
        self._loader, self._spec = loader, spec

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        begin(self._spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
