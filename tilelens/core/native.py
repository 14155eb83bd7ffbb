"""TileLens's optional compiled capture (``native_capture.cpp``): built once per torch and Python, cached, and
loaded when present; the pure-Python :func:`~tilelens.core.compiled_templates.capture` is used otherwise.

Why: on a launch-bound GPU program, reading a tensor's dtype, shape, strides, device, storage offset,
pointer and size through torch's Python API costs eight calls (~1 µs per tensor); libtorch's own accessors
cost nanoseconds (issue 15). Nothing else changes: the compiled function returns the same values and a
signature equal exactly when the Python one is (``tests/unit/test_native_capture.py`` checks both on the
same launches). The same module holds the compiled launcher (``Launcher``): a launch of a template already
made is finished there instead of in ``CompiledRouter.launch``'s Python, every other launch handed back to
the router (``tests/unit/test_native_launch.py`` checks the rows against the Python router's), and, from
``native_calls.cpp``, the interception of Triton's ``run`` methods (``Intercept``) and the autotuner's frame
(``Tuner``) without Python frames (``tests/unit/test_native_calls.py``).

How it is built: with the C++ compiler Triton's own launchers need (``$CXX``, else ``c++``/``g++``), against
the installed torch's headers and libraries, into ``TILELENS_NATIVE_DIR`` (default
``$XDG_CACHE_HOME/tilelens/native``, else ``~/.cache/tilelens/native``), named by a hash of the sources, the
torch build and the Python ABI, so another torch builds its own. Writes are atomic (a temporary file
renamed) and one build runs at a time (a lock file). With gcc the build is profile-guided (``PGO_ENV``): the
steady launch runs through a few hundred cache lines of this code, nearly all of them misses each launch, and
a profile of the stand-in step (``native_training``) lets gcc lay out those paths together. A failed build
leaves ``<name>.failed`` with the compiler's output, so a machine without a compiler does not try again per
recording; ``python -m tilelens.core.native build`` tries again.

``TILELENS_NATIVE`` chooses, read at each recording's start:

* unset or ``auto``: use it when built; else start building it in the background (a separate process, which
  takes no time of the program's: ~15–25 s of one core, once per torch), and capture in Python until the next recording;
* ``1``: build it now when missing (the recording waits), then use it;
* ``0``: never build or load it.

Invariant: the loaded module is the one built from this package's source for this torch (the hash), and
nothing a history holds can choose what is compiled or loaded.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import itertools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ENV = "TILELENS_NATIVE"
DIR_ENV = "TILELENS_NATIVE_DIR"
# 1: build (under another name) and load the profiling module, whose steady launch sums its parts' time-stamp
# counter ticks (`profile`); for measuring where a launch's time goes, never for recording in earnest.
PROFILE_ENV = "TILELENS_NATIVE_PROFILE"
SOURCE = Path(__file__).with_name("native_capture.cpp")
# Every file the module is built from (the header included by both sources): the build hashes them all.
SOURCES = (SOURCE, SOURCE.with_name("native_calls.cpp"))
HEADERS = (SOURCE.with_name("native_common.h"),)
MODULE = "_tilelens_capture"
# 0: build without a profile. Otherwise, when the compiler is gcc, the module is built in three steps: compiled
# instrumented, trained on the stand-in step (`native_training`, whose source is hashed into the name too), and
# compiled again with the profile (`-fprofile-use`), which lays out the paths a steady launch takes together
# and moves the others away. Any failure on that way builds it without a profile (the same code, as before).
PGO_ENV = "TILELENS_NATIVE_PGO"
TRAINING = SOURCE.with_name("native_training.py")

_lock = threading.Lock()
_loaded: Any = None  # the module, False once loading failed in this process, None before trying
_background: subprocess.Popen[bytes] | None = None


# The compiler's options besides paths and libraries; part of the module's name, so that changing one rebuilds
# it. -O3: gcc then inlines CPython's reference counting where -O2 called a copy of Py_DECREF.
FLAGS = ("-O3", "-shared", "-fPIC", "-std=c++17", "-w")
PROFILE_FLAGS = ("-DTILELENS_PROFILE",)


def flags() -> tuple[str, ...]:
    """The compiler's options for the module this program uses: :data:`FLAGS`, and :data:`PROFILE_FLAGS` when
    ``TILELENS_NATIVE_PROFILE=1``."""
    return FLAGS + PROFILE_FLAGS if os.environ.get(PROFILE_ENV, "").strip() == "1" else FLAGS


def profile_guided() -> bool:
    """Whether builds are profile-guided (``TILELENS_NATIVE_PGO``, on unless ``0``; gcc only)."""
    return os.environ.get(PGO_ENV, "1").strip() != "0"


def mode() -> str:
    """``auto``, ``1`` or ``0`` (``TILELENS_NATIVE``; anything else is ``auto``)."""
    value = os.environ.get(ENV, "auto").strip().lower()
    if value in ("0", "off", "no", "false"):
        return "0"
    if value in ("1", "on", "yes", "true", "sync"):
        return "1"
    return "auto"


def cache_dir() -> Path:
    explicit = os.environ.get(DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilelens" / "native"


def target() -> Path:
    """Where this source, built for this torch and this Python, lives."""
    return cache_dir() / _name()


@functools.cache
def _name() -> str:
    if profile_guided():
        return built_name("capture", (*SOURCES, *HEADERS, TRAINING), (*flags(), "profile-guided"))
    return built_name("capture", (*SOURCES, *HEADERS), flags())


def built_name(prefix: str, files: tuple[Path, ...], options: tuple[str, ...]) -> str:
    """The file name of a module built from ``files`` with ``options``, for this torch and this Python: a
    change in any of them is another name, so it is built anew (also the bench's C reference's)."""
    import torch

    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    for part in (torch.__version__, torch.__file__, sys.version, sysconfig.get_platform(), *options):
        digest.update(b"\0" + str(part).encode())
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return f"{prefix}-{digest.hexdigest()[:16]}{suffix}"


def compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    return None


def command(output: Path, sources: tuple[Path, ...] = SOURCES, extra: tuple[str, ...] = ()) -> list[str]:
    """The compiler command building ``output`` from ``sources`` (what ``torch.utils.cpp_extension`` would
    pass, without needing ninja), with the options ``extra`` added (a profile's). The bench's C reference
    (``benchmarks.reference_native``) is built by it too, so that both are compiled alike."""
    import torch
    from torch.utils import cpp_extension

    cxx = compiler()
    if cxx is None:
        raise FileNotFoundError("no C++ compiler (set CXX, or install g++)")
    includes = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    libraries = cpp_extension.library_paths()
    abi = int(bool(torch.compiled_with_cxx11_abi()))
    return [
        cxx,
        *(flags() if sources == SOURCES else FLAGS),
        *extra,
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *(f"-I{p}" for p in includes),
        *(str(p) for p in sources),
        "-o",
        str(output),
        *(f"-L{p}" for p in libraries),
        *(f"-Wl,-rpath,{p}" for p in libraries),
        "-lc10",
        "-ltorch",
        "-ltorch_cpu",
        "-ltorch_python",
    ]


def build(force: bool = False, wait: bool = True) -> tuple[Path | None, str]:
    """Build the module unless it is built (or failed before, unless ``force``): ``(path or None, what
    happened)``. ``wait=False``: return at once when another process is building it."""
    out = target()
    failed = out.with_name(out.name + ".failed")
    if out.exists():
        return out, "built"
    if failed.exists() and not force:
        return None, failed.read_text(errors="replace")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "build.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None, "another process is building it"
        if out.exists():  # built while this one waited
            return out, "built"
        partial = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        guided, why = _build_profile_guided(partial) if profile_guided() and _is_gcc() else (False, "")
        if guided:
            ok, text = True, ""
        else:
            try:
                done = subprocess.run(command(partial), capture_output=True, text=True, timeout=900)
                text = (done.stdout + done.stderr).strip()
                ok = done.returncode == 0
            except (OSError, subprocess.SubprocessError) as exc:
                text, ok = f"{type(exc).__name__}: {exc}", False
        if not ok:
            with contextlib.suppress(OSError):
                partial.unlink()
            failed.write_text(text[-20000:] + "\n")
            return None, text
        os.replace(partial, out)
        with contextlib.suppress(OSError):
            failed.unlink()
        if guided:
            return out, "built now (profile-guided)"
        if why:
            return out, f"built now (without a profile: {why.splitlines()[-1][:300]})"
        return out, "built now"


def _child_env() -> dict[str, str]:
    """The environment of a Python process this module starts (a background build, a training run): this
    program's, its ``sys.path`` as ``PYTHONPATH``, without ``TILELENS_FOLLOW*``, so that a recording this
    program is part of does not follow it into the user's history."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TILELENS_FOLLOW")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def _is_gcc() -> bool:
    """Whether the compiler is gcc (whose profile options the profile-guided build uses)."""
    cxx = compiler()
    if cxx is None:
        return False
    try:
        done = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    text = done.stdout.lower()
    return done.returncode == 0 and "free software foundation" in text and "clang" not in text


def _build_profile_guided(out: Path) -> tuple[bool, str]:
    """Build the module at ``out`` with gcc's profile feedback: compile it instrumented, run the stand-in step
    through it in a fresh process (``python -m tilelens.core.native_training``: its own temporary history and
    module folder, so nothing of the user's is touched and no build is nested in this one), compile it with the
    profile. (True, "") or (False, why): the caller then builds it without a profile."""
    with tempfile.TemporaryDirectory(prefix="tilelens-native-pgo-") as name:
        folder = Path(name)
        module = folder / f"{MODULE}.so"  # both compiles write here: gcc names the profile after the output
        data = folder / "profile"
        env = _child_env()
        env.update({ENV: "1", PGO_ENV: "0", DIR_ENV: str(folder / "cache"), "PYTHONHASHSEED": "0"})
        steps = (
            (command(module, extra=(f"-fprofile-generate={data}",)), None),
            ([sys.executable, "-m", "tilelens.core.native_training", str(module)], env),
            (command(module, extra=(f"-fprofile-use={data}", "-fprofile-partial-training")), None),
        )
        for i, (argv, step_env) in enumerate(steps):
            try:
                done = subprocess.run(
                    argv, capture_output=True, text=True, timeout=900, env=step_env, cwd=folder
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return False, f"{type(exc).__name__}: {exc}"
            if done.returncode != 0:
                return False, (done.stdout + done.stderr).strip() or f"exit status {done.returncode}"
            if i == 1 and not any(data.rglob("*.gcda")):
                return False, "the training run wrote no profile"
        shutil.move(str(module), str(out))
        return True, ""


def load() -> Any:
    """The built module (set up for torch's tensor type), or None when it is not built or does not load."""
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded or None
        path = target()
        if not path.exists():
            return None
        return _load_file(path)


def use_for_training(path: Path) -> Any:
    """Load the module at ``path`` (an instrumented build being trained: ``native_training``) as this program's
    compiled module, in place of the built one; None when it does not load. Only for that training process."""
    global _loaded
    with _lock:
        _loaded = None
        return _load_file(path)


def _load_file(path: Path) -> Any:
    """Load, set up and keep (``_loaded``) the module file at ``path``; None, kept as False, when it fails.
    The caller holds ``_lock``."""
    global _loaded
    try:
        import torch

        spec = importlib.util.spec_from_file_location(MODULE, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.setup(torch.Tensor)
    except Exception:  # noqa: BLE001 - a module that does not load is not used (status says why)
        _loaded = False
        return None
    _loaded = module
    from tilelens.core import thread_state

    thread_state.CHANGED.append(module.locals_changed)
    return module


def start_background_build() -> None:
    """Build in a process of its own (``python -m tilelens.core.native build --background``), once per
    program, unless it is built or failed before. The program never waits for it."""
    global _background
    with _lock:
        if _background is not None:
            _background.poll()  # reaped once it has ended; never started twice in one program
            return
        if compiler() is None:
            return
        out = target()
        if out.exists() or out.with_name(out.name + ".failed").exists():
            return
        env = _child_env()
        try:
            _background = subprocess.Popen(
                [sys.executable, "-m", "tilelens.core.native", "build", "--background"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        except OSError:
            _background = None


def profile(reset: bool = True) -> dict[str, tuple[int, int]] | None:
    """Per part of the steady compiled launch (``native_common.h``'s ``Part``), the time-stamp counter ticks
    and calls summed since the last reset, or None unless this program loaded the profiling build
    (``TILELENS_NATIVE_PROFILE=1``). ``benchmarks.launch_parts`` reports them."""
    module = loaded()
    if module is None:
        return None
    parts: dict[str, tuple[int, int]] | None = module.profile(reset)
    return parts


def loaded() -> Any:
    """The compiled module when this program has loaded it and ``TILELENS_NATIVE`` allows it, else None;
    never builds."""
    if mode() == "0":
        return None
    with _lock:
        return _loaded or None


def module_of(capture: Any) -> Any:
    """The compiled module whose ``capture`` ``capture`` is, or None (the Python capture)."""
    module = loaded()
    return module if module is not None and capture is getattr(module, "capture", None) else None


def intercept(original: Any, target: Any, caller: Any = None) -> Callable[..., Any] | None:
    """``original`` (one of Triton's ``run`` methods) intercepted by the compiled module's ``Intercept``: what
    ``interception_patches``' Python ``run_direct`` does, ``target(obj, args, kwargs)`` for the calls it takes,
    without a Python frame. ``caller``: a ``Tuner`` that frames the launches Triton's ``Autotuner.run`` makes,
    read from its Python frame (``native_calls.cpp``). None when the module is not loaded (the Python wrapper
    is used then)."""
    module = loaded()
    if module is None:
        return None
    from tilelens.core.thread_state import LOCAL

    run: Callable[..., Any] = module.Intercept(original, target, LOCAL, caller)
    return run


def counter(start: int) -> Iterator[int]:
    """``itertools.count(start)``, or the compiled module's ``Counter`` (the same, and the compiled launcher
    advances it without a call) when the module is built and ``TILELENS_NATIVE`` allows it (never builds)."""
    module = None if mode() == "0" else load()
    if module is None:
        return itertools.count(start)
    made: Iterator[int] = module.Counter(start)
    return made


def launch_batch() -> Any | None:
    """The compiled module's ``LaunchBatch`` (``native_capture.cpp``'s ``Batch``: steady launches packed one
    after another and queued for the writer process as one item), or None when the module is not built or
    ``TILELENS_NATIVE`` does not allow it (never builds). A writer without one queues each launch itself."""
    module = None if mode() == "0" else load()
    return None if module is None else module.LaunchBatch()


def _announce(name: str) -> None:
    """Call the loaded module's ``name()``, which tells its objects that something they keep changed; a no-op
    when the module is not loaded (none of its objects exists then), whatever ``TILELENS_NATIVE`` says now."""
    with _lock:
        module = _loaded or None
    if module is not None:
        getattr(module, name)()


def metadata_cleared() -> None:
    """Tell the compiled launchers that a router's metadata cache (``METADATA``) is being cleared: they keep
    the entries they read until then (``native_capture.cpp``'s ``MetaCache``)."""
    _announce("metadata_cleared")


def marks_added() -> None:
    """Tell the compiled ``Intercept`` objects that a layer was just marked ``_tilelens_trace``: they keep the
    layers they found unmarked until then (``native_calls.cpp``)."""
    _announce("marks_added")


def capture_function() -> Any:
    """What a recording starting now captures templated launches with: the compiled ``capture`` or None (the
    Python one), as ``TILELENS_NATIVE`` says."""
    chosen = mode()
    if chosen == "0":
        return None
    module = load()
    if module is None and chosen == "1":
        build()
        module = load()
    elif module is None:
        start_background_build()
    return None if module is None else module.capture


def main(argv: list[str]) -> int:
    """``python -m tilelens.core.native [build [--force] [--background] | status]``."""
    action = argv[0] if argv else "status"
    if action == "build":
        path, text = build(force="--force" in argv, wait="--background" not in argv)
        if "--background" not in argv:
            print(f"{path}: {text}" if path is not None else f"not built: {text}")
        return 0 if path is not None else 1
    if action == "status":
        path = target()
        failed = path.with_name(path.name + ".failed")
        state = "built" if path.exists() else "failed (see .failed)" if failed.exists() else "not built"
        print(f"{ENV}={mode()}  {path}  {state}  loads: {load() is not None}")
        return 0
    print("usage: python -m tilelens.core.native [build [--force] | status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
