"""Running a Python program in this process exactly as ``python SCRIPT ARGS`` or ``python -m MODULE ARGS`` would.

``tilelens record`` has to run the program in-process (the recording patches Triton in this interpreter),
yet the program must not be able to tell: ``sys.argv``, ``__main__``, ``sys.path[0]`` (the script's folder,
or the working directory for ``-m``), its exit status, and an uncaught exception's traceback all match
what ``python`` itself does. The caller gets an :class:`Outcome` instead of the process exiting.

SIGINT, SIGTERM and SIGHUP would end the process without a word (or, for SIGINT, with an exception the
program may swallow), leaving the caller's bookkeeping (a recording's run) unfinished. Inside
:func:`finishing_signals` (only where a signal's disposition was the default: a SIGHUP ignored under ``nohup``
stays ignored, a program's own handler stays the program's):

- the handler **records** the signal first, then raises :class:`KeyboardInterrupt` (SIGINT) or
  :class:`Terminated` (SIGTERM, SIGHUP) in the main thread, as python would;
- where that exception would be dropped (a ``__del__``, a weakref or GC callback, an atexit callback: python
  prints "Exception ignored in ..." and goes on), ``sys.unraisablehook`` sees it and the signal is raised
  again at the next instruction outside that callback, so the program still ends;
- inside :func:`deferred_signals` (TileLens's own bookkeeping: writing a launch, beginning or finishing a
  run) the handler only records the signal; the exception is raised when the block ends, so a signal never
  lands half-way through a database round trip;
- whatever the program did with the exception, the :class:`Outcome` says the run was interrupted or
  terminated (:func:`received_signal`), and :func:`redeliver` ends the process by that signal once the
  caller is done, so the parent sees the exit status it would have seen without TileLens. A second
  SIGTERM or SIGHUP kills at once.

The exit status is what the process really exits with: ``sys.exit(261)`` exits 5 and ``sys.exit(-1)`` 255
(the status is 8 bits), and the program's atexit callbacks run before the run is finished
(:func:`run_exit_callbacks`), so an ``os._exit`` or a signal in one of them is what the run records.
"""

from __future__ import annotations

import atexit
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

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
HANDLED_SIGNALS = (signal.SIGINT, *FINISHING_SIGNALS)


class _SignalState:
    """What the handlers of :func:`finishing_signals` know; one per process (signals go to the main thread)."""

    def __init__(self) -> None:
        self.installed = 0  # nesting depth of finishing_signals
        self.received: int | None = None  # the first signal since finishing_signals was entered
        self.consumed = False  # its exception reached the runner (or the caller's own except clause)
        self.deferring = 0  # nesting depth of deferred_signals
        self.again = False  # the next handler call is our own re-raise of a dropped exception


_signals = _SignalState()


def _signal_exception(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _on_signal(signum: int, frame: types.FrameType | None) -> None:
    st = _signals
    again, st.again = st.again, False
    if st.received is None:
        st.received = signum
    elif not again and signum in FINISHING_SIGNALS:  # a second SIGTERM/SIGHUP: end now
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if st.deferring:
        return
    if _inside_hook(frame):  # raised here it would be dropped again: once the hook has returned
        _raise_later(st.received, _held_gate(), 0.01)
        return
    st.consumed = False
    raise _signal_exception(st.received)


def _inside_hook(frame: types.FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code is _HOOK_CODE:
            return True
        frame = frame.f_back
    return False


def _held_gate() -> threading.Lock:
    gate = threading.Lock()
    gate.acquire()
    return gate


def _raise_later(signum: int, gate: threading.Lock, wait_s: float) -> None:
    """Send ``signum`` to the main thread again from a helper thread, once ``gate`` is let go (or after
    ``wait_s``): the main thread is then out of the callback that dropped the signal's exception, and a
    blocking call it has gone on to is interrupted as by the first signal."""
    _signals.again = True
    main = threading.main_thread().ident

    def send() -> None:
        if gate.acquire(timeout=wait_s):
            gate.release()
        with contextlib.suppress(Exception):  # the process may be ending
            if hasattr(signal, "pthread_kill") and main is not None:
                signal.pthread_kill(main, signum)
            else:  # pragma: no cover - not on POSIX
                import _thread

                _thread.interrupt_main(signal.Signals(signum))

    threading.Thread(target=send, name="tilelens-signal", daemon=True).start()


def _unraisable(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    def hook(unraisable: Any) -> None:
        exc = getattr(unraisable, "exc_value", None)
        st = _signals
        if st.received is not None and isinstance(exc, (KeyboardInterrupt, Terminated)):
            # The signal's exception landed in a __del__ or a callback and python dropped it: raise it again
            # once this hook has returned, in the code the callback interrupted.
            gate = _held_gate()
            try:
                _raise_later(st.received, gate, 5.0)
            finally:
                gate.release()
            return
        previous(unraisable)

    return hook


_HOOK_CODE = _unraisable(print).__code__  # type: ignore[attr-defined]


@contextlib.contextmanager
def finishing_signals() -> Iterator[None]:
    """SIGINT/SIGTERM/SIGHUP are recorded and raised inside the block (see the module's docstring); the
    previous handlers (and ``sys.unraisablehook``) come back after it."""
    saved: dict[int, Any] = {}
    st = _signals
    if threading.current_thread() is threading.main_thread():
        for sig in HANDLED_SIGNALS:
            current = signal.getsignal(sig)
            default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            if current is default or current is _on_signal:
                saved[sig] = signal.signal(sig, _on_signal)
    outermost = st.installed == 0
    if outermost:
        st.received, st.consumed, st.again = None, False, False
    st.installed += 1
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(previous_hook)
    try:
        yield
    finally:
        st.installed -= 1
        if sys.unraisablehook is not previous_hook:
            sys.unraisablehook = previous_hook
        for sig, previous in saved.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """TileLens's own bookkeeping: a signal inside the block is recorded and acted on when the block ends
    (and, if its exception never reached the runner, at the end of every later such block)."""
    st = _signals
    if threading.current_thread() is not threading.main_thread() or not st.installed:
        yield
        return
    st.deferring += 1
    try:
        yield
    finally:
        st.deferring -= 1
    if not st.deferring and st.received is not None and not st.consumed:
        st.consumed = True
        raise _signal_exception(st.received)


def received_signal() -> int | None:
    """The signal that came while :func:`finishing_signals` was in force, or None."""
    return _signals.received


def mark_consumed() -> None:
    """The received signal's exception reached its handler (the runner's, the caller's)."""
    _signals.consumed = True


def outcome_of_signal(signum: int) -> Outcome:
    if signum == signal.SIGINT:
        return Outcome(130, interrupted=True)
    return Outcome(128 + signum, signal=signum)


# -- the program's atexit callbacks ---------------------------------------------------------------------------

_program_exit_callbacks: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []


@contextlib.contextmanager
def _collecting_exit_callbacks() -> Iterator[None]:
    """While the program runs, ``atexit.register`` keeps the program's callbacks for
    :func:`run_exit_callbacks` (TileLens's own, and those registered before the program, stay atexit's)."""
    register, unregister = atexit.register, atexit.unregister

    def program_register(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        if str(getattr(func, "__module__", "") or "").startswith("tilelens."):
            return register(func, *args, **kwargs)
        _program_exit_callbacks.append((func, args, kwargs))
        return func

    def program_unregister(func: Callable[..., Any]) -> None:
        _program_exit_callbacks[:] = [c for c in _program_exit_callbacks if c[0] != func]
        unregister(func)

    atexit.register, atexit.unregister = program_register, program_unregister  # type: ignore[assignment]
    try:
        yield
    finally:
        atexit.register, atexit.unregister = register, unregister  # type: ignore[assignment]


def run_exit_callbacks(outcome: Outcome, on_hard_exit: Callable[[int], None]) -> Outcome:
    """Run the atexit callbacks the program registered, last first, as python would at its exit, and return
    how the process ends: a signal during one ends it as that signal; an ``os._exit(code)`` in one calls
    ``on_hard_exit(code)`` (the caller's last word: the run stored with that status) before the process ends
    there; an exception in one is printed and the next runs, as python does."""
    real_exit = os._exit

    def hard_exit(code: int) -> None:
        os._exit = real_exit
        with contextlib.suppress(BaseException):
            on_hard_exit(code & 0xFF)
        _flush()
        real_exit(code)

    with finishing_signals():
        os._exit = hard_exit  # type: ignore[assignment]
        try:
            while _program_exit_callbacks:
                func, args, kwargs = _program_exit_callbacks.pop()
                if func is real_exit:  # atexit.register(os._exit, 5) keeps the function itself
                    func = hard_exit
                try:
                    func(*args, **kwargs)
                except (KeyboardInterrupt, Terminated):
                    mark_consumed()
                    break
                except BaseException as exc:  # noqa: BLE001 - printed as python prints it, then the next runs
                    _flush()
                    print(f"Exception ignored in atexit callback: {func!r}", file=sys.stderr)
                    traceback.print_exception(type(exc), exc, exc.__traceback__)
        finally:
            os._exit = real_exit
            _program_exit_callbacks.clear()
        received = received_signal()
    if received is not None and outcome.signal is None and not outcome.interrupted:
        return outcome_of_signal(received)
    return outcome


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
        with _program_path(target), finishing_signals(), _collecting_exit_callbacks():
            try:
                if target.is_module:
                    runpy.run_module(target.name, run_name="__main__", alter_sys=True)
                elif os.path.isdir(target.name) or _is_zip(target.name):
                    runpy.run_path(target.name, run_name="__main__")
                else:
                    _run_script(target.name)
            except SystemExit as exc:
                outcome = Outcome(exit_status(exc.code))
            except KeyboardInterrupt as exc:
                mark_consumed()
                _print_uncaught(exc)
                outcome = Outcome(130, interrupted=True)
            except Terminated as exc:  # python prints nothing when a signal ends it
                mark_consumed()
                outcome = Outcome(128 + exc.signum, signal=exc.signum)
            except BaseException as exc:  # noqa: BLE001 - the program's own failure, reported as python does
                _print_uncaught(exc)
                outcome = Outcome(1)
            else:
                outcome = Outcome(0)
            # A signal the program swallowed (an except clause, a __del__) still ends the run as the signal.
            received = received_signal()
            if received is not None and outcome.signal is None and not outcome.interrupted:
                mark_consumed()
                return outcome_of_signal(received)
            return outcome
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
    """``sys.exit(code)`` as the process exits with it: None is 0, text is printed and gives 1, an int is
    taken modulo 256 as the operating system does (``sys.exit(261)`` exits 5, ``sys.exit(-1)`` 255)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if os.name == "posix" else code
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
