"""Running a Python program in this process exactly as ``python SCRIPT ARGS`` or ``python -m MODULE ARGS`` would.

``tilelens record`` has to run the program in-process (the recording patches Triton in this interpreter),
yet the program must not be able to tell: ``sys.argv``, ``__main__``, ``sys.path[0]`` (the script's folder,
or the working directory for ``-m``), its exit status, and an uncaught exception's traceback all match
what ``python`` itself does. The caller gets an :class:`Outcome` instead of the process exiting.

SIGTERM and SIGHUP would end the process without a word, leaving the caller's bookkeeping (a recording's run)
unfinished. For the program's duration they raise :class:`Terminated` in the main thread instead (only where
their disposition was the default: a SIGHUP ignored under ``nohup`` stays ignored); the outcome says which
signal, and :func:`redeliver` ends the process by that signal once the caller is done, so the parent sees
the exit status it would have seen without TileLens. A second signal kills at once.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.machinery
import importlib.util
import io
import os
import runpy
import signal
import sys
import threading
import traceback
import types
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

from tilelens.errors import ProgramNotFoundError


@dataclass(frozen=True)
class Target:
    """What to run: a script path (or a folder / zip with ``__main__.py``) or a module name."""

    name: str
    is_module: bool = False

    @property
    def display(self) -> str:
        return f"-m {self.name}" if self.is_module else self.name


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    interrupted: bool = False  # KeyboardInterrupt: the caller re-raises it once its bookkeeping is done
    signal: int | None = None  # SIGTERM/SIGHUP ended the program; exit_code is 128 + signal


class Terminated(BaseException):
    """Raised in the program's main thread by SIGTERM or SIGHUP (see the module's docstring)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


FINISHING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _raise_terminated(signum: int, _frame: object) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once
    raise Terminated(signum)


@contextlib.contextmanager
def finishing_signals() -> Iterator[None]:
    """SIGTERM/SIGHUP raise :class:`Terminated` inside the block; the previous handlers come back after it."""
    saved: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in FINISHING_SIGNALS:
            if signal.getsignal(sig) is signal.SIG_DFL:
                saved[sig] = signal.signal(sig, _raise_terminated)
    try:
        yield
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)  # type: ignore[arg-type]


def redeliver(signum: int) -> None:
    """End this process by ``signum`` with its default action, as if TileLens had not caught it."""
    _flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def check(target: Target) -> None:
    """Refuse a missing script or module before anything (a recording, say) starts.

    The messages are python's own.
    """
    if target.is_module:
        with _program_path(target):
            try:
                spec = importlib.util.find_spec(target.name)
            except (ImportError, ValueError) as exc:
                raise ProgramNotFoundError(
                    f"Error while finding module specification for {target.name!r}: {exc}"
                ) from None
        if spec is None:
            raise ProgramNotFoundError(f"No module named {target.name}")
        return
    if not os.path.exists(target.name):
        path = os.path.abspath(target.name)
        raise ProgramNotFoundError(f"can't open file {path!r}: [Errno 2] No such file or directory")
    if os.path.isdir(target.name):
        has_main = os.path.isfile(os.path.join(target.name, "__main__.py"))
    elif _is_zip(target.name):
        with zipfile.ZipFile(target.name) as archive:
            has_main = "__main__.py" in archive.namelist()
    else:
        return
    if not has_main:  # python would start, fail and exit 1; say so before a recording begins
        raise ProgramNotFoundError(f"can't find '__main__' module in {os.path.abspath(target.name)!r}")


def path_entry(target: Target) -> str:
    """What python puts in ``sys.path[0]``: the script's real folder, the folder or zip itself, or the cwd."""
    if target.is_module:
        return os.getcwd()
    if os.path.isdir(target.name) or _is_zip(target.name):
        return target.name
    return os.path.dirname(os.path.realpath(target.name))


@contextlib.contextmanager
def _program_path(target: Target) -> Iterator[None]:
    saved = list(sys.path)
    entry = path_entry(target)
    if sys.path:
        sys.path[0] = entry  # the entry that pointed at tilelens's own launcher
    else:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        sys.path[:] = saved


def _is_zip(path: str) -> bool:
    return not path.endswith(".py") and os.path.isfile(path) and zipfile.is_zipfile(path)


def run(target: Target, args: list[str]) -> Outcome:
    """Run the program to completion in this process and report how it ended.

    An uncaught exception is printed through ``sys.excepthook`` with TileLens's own frames removed, so the
    traceback starts at the program's first line as python's would.
    """
    saved_argv = sys.argv
    sys.argv = [target.name, *args]
    try:
        with _program_path(target), finishing_signals():
            try:
                if target.is_module:
                    runpy.run_module(target.name, run_name="__main__", alter_sys=True)
                elif os.path.isdir(target.name) or _is_zip(target.name):
                    runpy.run_path(target.name, run_name="__main__")
                else:
                    _run_script(target.name)
            except SystemExit as exc:
                return Outcome(exit_status(exc.code))
            except KeyboardInterrupt as exc:
                _print_uncaught(exc)
                return Outcome(130, interrupted=True)
            except Terminated as exc:  # python prints nothing when a signal ends it
                return Outcome(128 + exc.signum, signal=exc.signum)
            except BaseException as exc:  # noqa: BLE001 - the program's own failure, reported as python does
                _print_uncaught(exc)
                return Outcome(1)
            return Outcome(0)
    finally:
        sys.argv = saved_argv
        _flush()


def _run_script(path: str) -> None:
    """Execute a script file as python's ``__main__``.

    Not ``runpy.run_path``: python names the script by its absolute path in ``__file__`` and tracebacks
    while ``sys.argv[0]`` keeps the spelling the user typed, and run_path cannot do both.
    """
    filename = os.path.abspath(path)
    with io.open_code(filename) as f:
        source = f.read()
    code = compile(source, filename, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=filename,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", filename),
        __builtins__=builtins,
    )
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def exit_status(code: object) -> int:
    """``sys.exit(code)`` as python turns it into a status: None is 0, text is printed and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


# runpy may be frozen ("<frozen runpy>"), so take the file names its code objects really carry.
_OWN_FILES = {run.__code__.co_filename, runpy.run_path.__code__.co_filename}


def _print_uncaught(exc: BaseException) -> None:
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OWN_FILES:
        tb = tb.tb_next
    # The default hook prints the exception's own __traceback__, whatever ``tb`` it is given.
    exc.__traceback__ = tb
    _flush()
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:  # a broken hook: python falls back to the default printer too
        traceback.print_exception(type(exc), exc, tb)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a program may leave a closed or odd stream behind
            stream.flush()
