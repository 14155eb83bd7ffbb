"""A standalone reproducer of one recorded launch: ``tilelens repro ID -o DIR``.

The folder holds ``repro.py`` (``tilelens.replay.repro_script``, copied as it is: torch, Triton and numpy only),
``repro.json`` (the launch: kernel, grid, constexprs and launch options as chosen, every argument's dtype,
shape, strides and storage offset, the kernel's bundle, the versions it was recorded with, the tolerances a
GPU replay is held to) and ``.npy`` files: each argument storage as rebuilt from its before-snapshot (raw
bytes; views of one storage share one file) and, per argument the launch wrote, its recorded after-span: arrays
of numbers only, which numpy reads as plain data. ``run_repro`` runs the folder's script with another Python (another Triton): what
``tilelens replay --python`` stores.

Invariants: the folder appears whole or not at all (written beside it, then renamed into place); an existing
non-empty folder is replaced only with ``force``; nothing is written for a launch that cannot be reproduced
(no snapshots, a TMA descriptor argument, a value kept only as its repr).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from tilelens.errors import TileLensError, UsageError
from tilelens.replay.compare import default_tolerance
from tilelens.replay.rebuild import decode_options, decode_value, rebuild_arguments
from tilelens.replay.result import ReplayFailure, ReplayResult
from tilelens.store import History
from tilelens.store.read.launches import LaunchSpec, load_launch

SCRIPT = Path(__file__).with_name("repro_script.py")


class ReproError(TileLensError):
    """A repro that cannot be written or run as asked; exit status 2."""

    exit_code = 2


@dataclass(frozen=True)
class ReproFolder:
    path: Path
    launch_id: int
    files: tuple[str, ...]
    kernel_from: str  # "bundle" when the record keeps one, else "module" (the kernel must be importable)


def write_repro(history: History, launch_id: int, folder: Path, *, force: bool = False) -> ReproFolder:
    """Write the reproducer of launch ``launch_id`` into ``folder`` (see the module docstring)."""
    spec = load_launch(history, launch_id)
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())) and not force:
        raise UsageError(f"{folder} exists and is not an empty folder (--force replaces it)")
    tensors = [a for a in spec.args if a.kind == "tensor"]
    if any(a.before_blob is None for a in tensors):
        raise UsageError(
            f"launch {spec.id} was recorded without tensor snapshots (a compiled recording with "
            'snapshots="none", or past its budget): there is nothing to rebuild its arguments from'
        )
    for a in spec.args:
        if isinstance(a.value, dict) and ({"descriptor", "reinterpret"} & set(a.value)):
            raise UsageError(
                f"launch {spec.id}: argument {a.name} is a TMA descriptor or a reinterpreted "
                "tensor, which repro does not rebuild (tilelens replay does)"
            )
    parent = folder.resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write into {parent}: not a writable folder")
    try:
        manifest, arrays = _manifest(history, spec)
    except ReplayFailure as exc:
        raise UsageError(str(exc)) from None
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=parent))
    try:
        for name, array in arrays.items():
            if array.dtype.hasobject:  # never from a tensor: a .npy of Python objects would be code to load
                raise ValueError(f"{name}: an array of Python objects is never written")
            np.save(staging / name, array)
        (staging / "repro.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        shutil.copyfile(SCRIPT, staging / "repro.py")
        if folder.exists():
            shutil.rmtree(folder) if folder.is_dir() else folder.unlink()
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    files = tuple(sorted(p.name for p in folder.iterdir()))
    return ReproFolder(folder, spec.id, files, "bundle" if manifest["bundle"] else "module")


def _manifest(history: History, spec: LaunchSpec) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    rebuilt = rebuild_arguments(history.blobs, spec, torch.device("cpu"))
    arrays: dict[str, np.ndarray] = {}
    storages: list[dict[str, Any]] = []
    by_storage: dict[int, int] = {}
    args: list[dict[str, Any]] = []
    expected: list[dict[str, Any]] = []
    views = {t.spec.position: t for t in rebuilt.tensors}
    for a in spec.args:
        if a.kind == "tensor":
            t = views[a.position]
            view = t.view
            storage = view.untyped_storage()
            index = by_storage.get(storage.data_ptr())
            if index is None:
                index = by_storage[storage.data_ptr()] = len(storages)
                name = f"storage{index}.npy"
                raw = torch.empty(0, dtype=torch.uint8).set_(storage)
                arrays[name] = raw.numpy().copy()
                storages.append({"file": name, "bytes": int(storage.nbytes())})
            args.append(
                {
                    "name": a.name,
                    "kind": "tensor",
                    "dtype": str(view.dtype).removeprefix("torch."),
                    "shape": list(view.shape),
                    "strides": list(view.stride()),
                    "offset": int(view.storage_offset()),
                    "storage": index,
                }
            )
            if a.after_blob is not None and a.after_blob != a.before_blob:
                span = t.expected.contiguous()
                file = f"expected_{a.position}.npy"
                arrays[file] = (
                    span.view(torch.uint8).numpy().copy() if span.numel() else np.zeros(0, np.uint8)
                )
                entry: dict[str, Any] = {"name": a.name, "file": file, "elements": int(span.numel())}
                tolerance = default_tolerance(view.dtype, span, spec.kernel.source)
                entry["tolerance"] = {"atol": tolerance.atol, "rtol": tolerance.rtol}
                if t.known is not None:
                    entry["known"] = f"known_{a.position}.npy"
                    arrays[entry["known"]] = np.asarray(t.known, dtype=np.int64)
                expected.append(entry)
        elif a.kind == "none":
            args.append({"name": a.name, "kind": "none"})
        elif a.kind != "constexpr":
            value = _plain(spec, a.name, decode_value(spec, a.name, a.value))
            args.append(
                {
                    "name": a.name,
                    "kind": "scalar",
                    "value": value,
                    "type": (a.value_type or "").partition(":")[0],
                }
            )
    constexprs = {
        name: _plain(spec, name, decode_value(spec, name, v)) for name, v in spec.constexprs.items()
    }
    recorded = {k: spec.versions.get(k) for k in ("triton", "torch", "numpy", "python", "tilelens")}
    recorded["device"] = spec.device
    manifest = {
        "version": 1,
        "launch": spec.id,
        "kernel": {
            "name": spec.kernel.name,
            "module": spec.kernel.module,
            "qualname": spec.kernel.qualname,
            "source_sha256": spec.kernel.source_sha256,
        },
        "status": spec.status,
        "grid": list(spec.grid),
        "constexprs": constexprs,
        "options": {k: _plain(spec, k, v) for k, v in decode_options(spec).items()},
        "args": args,
        "storages": storages,
        "expected": expected,
        "bundle": _bundle(history, spec),
        "recorded": recorded,
        "out_of_bounds_reads": bool(spec.trace_blob) and _has_oob_reads(history, spec),
    }
    return manifest, arrays


def _plain(spec: LaunchSpec, name: str, value: Any) -> Any:
    """A value repro.json can hold as JSON and repro.py turns back (ints, floats, bools, strings, None)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    import triton.language as tl

    if isinstance(value, tl.dtype):
        return {"tl_dtype": value.name}
    if isinstance(value, tuple):
        return [_plain(spec, name, v) for v in value]
    raise ReplayFailure(
        f"launch {spec.id}: {name} is a {type(value).__name__}, which repro.json cannot hold (tilelens replay can)"
    )


def _bundle(history: History, spec: LaunchSpec) -> dict[str, Any] | None:
    if spec.bundle_blob is None:
        return None
    table: pa.Table = history.blobs.get_table(spec.bundle_blob)
    loaded: dict[str, Any] = json.loads(table.column("bundle")[0].as_py())
    return loaded


def _has_oob_reads(history: History, spec: LaunchSpec) -> bool:
    assert spec.trace_blob is not None
    trace = history.blobs.get_table(spec.trace_blob)
    oob = trace.column("oob").to_numpy(zero_copy_only=False) if "oob" in trace.column_names else np.zeros(0)
    ops = trace.column("op").to_pylist() if "op" in trace.column_names else []
    return any(n > 0 and op != "store" for n, op in zip(oob, ops))


# -- another Python ---------------------------------------------------------------------------------------------


def absolute_python(python: str) -> str:
    """``python`` made absolute against the caller's directory when it is a path (``.venv/bin/python``), since
    the repro runs in a folder of its own; a bare name (``python3``) is left for ``PATH``. Not ``realpath``:
    a venv's interpreter is a link whose target is a Python without that venv."""
    return os.path.abspath(python) if os.sep in python else python


def check_python(python: str) -> dict[str, str]:
    """The versions of ``python`` (a path to a Python with torch, Triton and numpy); refuses anything else."""
    code = "import json, platform, torch, triton, numpy; print(json.dumps({'python': platform.python_version(), 'torch': torch.__version__, 'triton': triton.__version__, 'numpy': numpy.__version__}))"
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"--python {python}: cannot run it ({type(exc).__name__}: {exc})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"--python {python} is not a Python with torch, Triton and numpy ({last})")
    try:
        versions: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise UsageError(f"--python {python} did not answer as a Python does") from None
    return versions


def replay_with_python(
    history: History, launch_id: int, python: str, device: str = "cpu", store: bool = True
) -> ReplayResult:
    """Replay launch ``launch_id`` in another interpreter (another venv, another Triton) through a repro folder,
    and store the outcome as a ``replays`` row whose versions name both the recording and the replaying
    Triton. ``python`` is checked first (a Python with torch, Triton and numpy); a replay that cannot start
    there (no such device, the kernel not loadable) raises :class:`UsageError` and stores nothing."""
    import time

    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", device):
        raise UsageError(f"unknown device {device!r}; use cpu or cuda[:N]")
    python = absolute_python(python)
    versions = check_python(python)
    started = time.perf_counter()
    spec = load_launch(history, launch_id)
    with tempfile.TemporaryDirectory(prefix="tilelens-repro-") as name:
        folder = write_repro(history, launch_id, Path(name) / "repro")
        outcome = run_repro(folder.path, python, device)
    if outcome.get("outcome") not in ("match", "mismatch") and not outcome.get("launched"):
        # It never started (no such device there, the kernel not loadable): nothing to store.
        raise UsageError(f"launch {spec.id} cannot be replayed with {python}: {outcome.get('message', '')}")
    result = ReplayResult(
        launch_id=spec.id,
        kernel=spec.kernel.name,
        device=device,
        backend="interpreter" if device == "cpu" else "compiled",
        outcome=outcome.get("outcome", "error")
        if outcome.get("outcome") in ("match", "mismatch")
        else "error",
        message="",
        record_s=spec.duration_s,
    )
    recorded = outcome.get("recorded") or {}
    replayed = outcome.get("replayed") or dict(versions, device=device)
    result.max_abs_err = outcome.get("max_abs_err")
    result.max_rel_err = outcome.get("max_rel_err")
    result.message = (
        f"launch {spec.id} ({spec.kernel.name}) recorded with Triton {recorded.get('triton')}, replayed with "
        f"Triton {replayed.get('triton')} ({python}) on {device}: {outcome.get('outcome')}: {outcome.get('message', '')}"
    )
    result.duration_s = time.perf_counter() - started
    if store:
        result.replay_id = history.write_replay(
            spec.id,
            outcome=result.outcome,
            device=device,
            backend=result.backend,
            max_abs_err=result.max_abs_err,
            max_rel_err=result.max_rel_err,
            message=result.message,
            duration_s=result.duration_s,
            versions={
                **{k: str(v) for k, v in replayed.items()},
                "python_path": python,
                "recorded": recorded,
            },
        )
    return result


def run_repro(folder: Path, python: str, device: str = "cpu", timeout: float = 3600) -> dict[str, Any]:
    """Run ``folder``'s repro.py with ``python`` on ``device``; its JSON outcome."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TILELENS_", "TRITON_INTERPRET"))}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [python, str(folder / "repro.py"), "--device", device, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=folder,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    lines = done.stdout.strip().splitlines()
    try:
        outcome: dict[str, Any] = json.loads(lines[-1])
    except (ValueError, IndexError):
        tail = " ".join((done.stderr.strip().splitlines() or ["no output"])[-1:])
        return {
            "outcome": "error",
            "message": f"repro.py exited {done.returncode} without an outcome: {tail}",
        }
    return outcome
