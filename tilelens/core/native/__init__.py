"""The optional native accessor (``accessor.cpp``) and the one place that chooses it or the Python path.

Why it exists: a compiled recording reads every tensor argument's dtype, shape, strides, device, storage
offset, pointer and bytes on the launching thread. Through torch's Python API that is eight calls a tensor;
libtorch answers in nanoseconds. On the H200's launch-bound step the Python read cost far more than the rest
of recording (docs/gpu-recording.md, BENCHMARKS.md). Nothing else is native: the accessor returns what the
Python :func:`tilelens.core.compiled.templates.capture` returns, and ``tests/unit/test_native_accessor.py``
checks both on the same launches.

How it is built: with ``torch.utils.cpp_extension.load`` (ninja and the C++ compiler torch's extensions use),
``-Wall -Werror``, in a process of its own (``python -m tilelens.core.native build``), into
``TILELENS_NATIVE_DIR`` (default ``$XDG_CACHE_HOME/tilelens/native``, else ``~/.cache/tilelens/native``),
named by a hash of the source, the torch build and the Python ABI, so another torch builds its own. The
finished module is renamed into place, so a reader never sees half a file. A failed build leaves
``<name>.failed`` with the compiler's output, so a machine without a compiler does not try again per
recording; ``python -m tilelens.core.native build --force`` does.

``TILELENS_NATIVE`` chooses, read at each recording's start (:func:`choose`):

* unset or ``auto``: use it when built; else start building it in the background (the program never waits)
  and record in Python until a later recording;
* ``1``: build it now when missing (the recording waits), then use it;
* ``0``: never build or load it.

``tilelens doctor`` prints the choice and why (:func:`describe`). Invariant: the loaded module is the one built
from this package's source for this torch (the hash); nothing a history holds chooses what is built or loaded.
Importing this module needs neither torch nor a compiler.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

ENV = "TILELENS_NATIVE"
DIR_ENV = "TILELENS_NATIVE_DIR"
SOURCE = Path(__file__).with_name("accessor.cpp")
# The compiler's options; part of the module's name, so that changing one builds it anew.
CFLAGS = ("-O2", "-Wall", "-Wextra", "-Werror")
# ``address``: built with AddressSanitizer (compile and link), for the sanitized test run of .ci/run; the
# process must then preload the sanitizer's runtime (LD_PRELOAD). Part of the name too.
SANITIZE_ENV = "TILELENS_NATIVE_SANITIZE"


class Accessor(Protocol):
    """The built module's interface (``accessor.cpp``)."""

    def setup(self, tensor_type: type, /) -> None: ...

    def capture(self, plan: Any, bound: dict[str, Any], last: Any, /) -> tuple[Any, list[Any]] | None: ...


@dataclass(frozen=True)
class Choice:
    """What a recording starting now captures with, and why."""

    accessor: Accessor | None
    why: str

    @property
    def native(self) -> bool:
        return self.accessor is not None


_lock = threading.Lock()
_loaded: Accessor | None = None  # the loaded module, once loaded
_load_failed = False  # loading failed in this process: not tried again
_background: subprocess.Popen[bytes] | None = None


def mode() -> str:
    """``auto``, ``1`` or ``0`` (``TILELENS_NATIVE``; anything else is ``auto``)."""
    value = os.environ.get(ENV, "auto").strip().lower()
    if value in ("0", "off", "no", "false"):
        return "0"
    if value in ("1", "on", "yes", "true"):
        return "1"
    return "auto"


def cflags() -> tuple[str, ...]:
    return CFLAGS + sanitizer_flags()


def sanitizer_flags() -> tuple[str, ...]:
    sanitize = os.environ.get(SANITIZE_ENV, "").strip()
    # gcc's -Wmaybe-uninitialized reports torch's and pybind11's headers as used in this file under ASan (its
    # instrumentation defeats the analysis): a warning, not an error, in that build only.
    return (
        (f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-Wno-error=maybe-uninitialized")
        if sanitize
        else ()
    )


def cache_dir() -> Path:
    explicit = os.environ.get(DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilelens" / "native"


def module_name() -> str:
    """The module's name for this source, these flags, this torch and this Python (imports torch)."""
    import torch

    digest = hashlib.sha256(SOURCE.read_bytes())
    for part in (torch.__version__, torch.__file__, sys.version, sysconfig.get_platform(), *cflags()):
        digest.update(b"\0" + str(part).encode())
    return f"tilelens_accessor_{digest.hexdigest()[:16]}"


def target() -> Path:
    """Where the built module lives."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return cache_dir() / f"{module_name()}{suffix}"


def _failed(path: Path) -> Path:
    return path.with_name(path.name + ".failed")


def build(force: bool = False) -> tuple[Path | None, str]:
    """Build the module in this process unless it is built (or failed before, unless ``force``): ``(path or
    None, what happened)``. One build at a time where the system has ``fcntl`` (a second process waits, then
    finds it built); elsewhere two builds both succeed and the second rename wins."""
    out = target()
    if out.exists():
        return out, "built"
    if _failed(out).exists() and not force:
        return None, _failed(out).read_text(errors="replace")
    out.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(out.parent / ".build.lock"):
        if out.exists():  # built while this process waited
            return out, "built"
        return _build(out)


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` for the block (released when the process dies), where ``fcntl`` exists."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(out: Path) -> tuple[Path | None, str]:
    name = out.name.split(".")[0]
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=out.parent) as folder:
        try:
            from torch.utils import cpp_extension

            cpp_extension.load(
                name,
                [str(SOURCE)],
                extra_cflags=list(cflags()),
                extra_ldflags=list(sanitizer_flags()),
                build_directory=folder,
                verbose=False,
            )
            built = next(Path(folder).glob(f"{name}*.so"))
            os.replace(built, out)
        except Exception as exc:  # noqa: BLE001 - the compiler's output (or why there is none) is kept
            text = f"{type(exc).__name__}: {exc}"
            _failed(out).write_text(text[-20000:] + "\n")
            return None, text
    with contextlib.suppress(OSError):
        _failed(out).unlink()
    return out, "built now"


def start_background_build() -> None:
    """Build in a process of its own, once per program, unless it is built or failed before."""
    global _background
    with _lock:
        if _background is not None:
            _background.poll()  # reaped once it has ended; never started twice in one program
            return
        out = target()
        if out.exists() or _failed(out).exists() or shutil.which("ninja") is None and not _ninja_module():
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith("TILELENS_FOLLOW")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            _background = subprocess.Popen(
                [sys.executable, "-m", "tilelens.core.native", "build"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        except OSError:
            _background = None


def _ninja_module() -> bool:
    return importlib.util.find_spec("ninja") is not None


def load() -> Accessor | None:
    """The built module, set up for torch's tensor type; None when it is not built or does not load."""
    global _loaded, _load_failed
    with _lock:
        if _loaded is not None or _load_failed:
            return _loaded
        path = target()
        if not path.exists():
            return None
        try:
            import torch

            spec = importlib.util.spec_from_file_location(path.name.split(".")[0], path)
            assert spec is not None and spec.loader is not None
            module: Any = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.setup(torch.Tensor)
        except Exception:  # noqa: BLE001 - a module that does not load is not used (doctor says why)
            _load_failed = True
            return None
        _loaded = accessor = cast(Accessor, module)
        return accessor


def choose() -> Choice:
    """The one decision: the native accessor or the Python capture for a recording starting now, and why."""
    chosen = mode()
    if chosen == "0":
        return Choice(None, f"{ENV}=0: the Python capture")
    accessor = load()
    if accessor is None and chosen == "1":
        _, text = build()
        accessor = load()
        if accessor is None:
            return Choice(None, f"{ENV}=1 but the build failed: {text.strip().splitlines()[-1][:200]}")
    if accessor is not None:
        return Choice(accessor, f"the native accessor ({target()})")
    if _failed(target()).exists():
        return Choice(None, f"the Python capture: the native build failed (see {_failed(target())})")
    start_background_build()
    return Choice(None, "the Python capture: the native accessor is being built in the background")


def describe() -> str:
    """One line for ``tilelens doctor``: what a recording starting now would use, without building."""
    chosen = mode()
    if chosen == "0":
        return f"{ENV}=0: the Python capture"
    path = target()
    if load() is not None:
        return f"native accessor: {path}"
    if _failed(path).exists():
        return f"Python capture: the native build failed ({_failed(path)})"
    return f"Python capture: the native accessor is not built yet ({path}; {ENV}=1 builds it now)"


def main(argv: list[str]) -> int:
    """``python -m tilelens.core.native [build [--force] | status]``."""
    action = argv[0] if argv else "status"
    if action == "build":
        path, text = build(force="--force" in argv)
        print(f"{path}: {text}" if path is not None else f"not built: {text}")
        return 0 if path is not None else 1
    if action == "status":
        print(describe())
        return 0
    print("usage: python -m tilelens.core.native [build [--force] | status]", file=sys.stderr)
    return 2
