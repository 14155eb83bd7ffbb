"""How a failed launch is described in its record: the underlying error, the unsupported construct when it
is one, and where in the kernel's source it happened.

Both ways of recording (interpreted and compiled) and replay describe failures alike. ``UnsupportedConstruct``
is what TileLens raises for a construct it cannot run on the CPU (the engine's semantics, the Gluon simulator).
"""

from __future__ import annotations

import linecache
import os

import numpy as np

from tilelens.core import compat


class UnsupportedConstruct(NotImplementedError):
    """A construct TileLens cannot run on the CPU; ``construct`` names it for the launch record."""

    def __init__(self, construct: str, detail: str = "") -> None:
        self.construct = construct
        super().__init__(f"{construct} is not supported by the interpreter{detail}")


_STOCK_UNSUPPORTED = {
    "inline_asm not supported in interpreter mode": "tl.inline_asm_elementwise",
    "extern_elementwise not supported in interpreter mode": "extern_elementwise",
}

# Code that is not the user's: Triton, numpy, TileLens itself and the standard library.
_TILELENS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OWN_FILES = (
    os.path.dirname(os.path.abspath(compat.triton.__file__)),
    os.path.dirname(os.path.abspath(np.__file__)),
    _TILELENS,
    os.path.dirname(os.path.abspath(os.__file__)),
)


def _root_cause(exc: BaseException) -> BaseException:
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if nxt is None:
            break
        exc = nxt
    return exc


def _kernel_frame(exc: BaseException | None) -> tuple[str, int] | None:
    """The innermost frame of user code (a kernel or one of its helpers) along the exception chain."""
    chain = []
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    for link in reversed(chain):  # the root cause first: it was raised deepest
        found = None
        tb = link.__traceback__
        while tb is not None:
            raw = tb.tb_frame.f_code.co_filename
            filename = os.path.abspath(raw)
            if not raw.startswith("<") and not filename.startswith(_OWN_FILES):
                found = (filename, tb.tb_lineno)
            tb = tb.tb_next
        if found is not None:
            return found
    return None


def _construct(cause: BaseException) -> str | None:
    if isinstance(cause, UnsupportedConstruct):
        return cause.construct
    text = str(cause)
    for needle, construct in _STOCK_UNSUPPORTED.items():
        if needle in text:
            return construct
    if isinstance(cause, AttributeError) and "'InterpreterBuilder' object has no attribute" in text:
        return f"the IR operation {getattr(cause, 'name', None) or text.rsplit(' ', 1)[-1]}"
    return None


def describe_failure(exc: BaseException) -> str:
    """The message a failed launch is recorded with: what failed, and where in the kernel's source.

    The interpreter wraps every error in ``InterpreterError(repr(e))``; the record names the underlying
    error instead, and the unsupported construct when it is one.
    """
    cause = _root_cause(exc)
    construct = _construct(cause)
    if construct is not None:
        head = f"{construct} is not supported by the interpreter"
    else:
        head = f"{type(cause).__name__}: {str(cause) or type(cause).__name__}"
    where = _kernel_frame(exc)
    if where is None:
        return head
    filename, line = where
    source = linecache.getline(filename, line).strip()
    location = f"{os.path.basename(filename)}:{line}"
    return f"{head} ({location}: `{source}`)" if source else f"{head} ({location})"
