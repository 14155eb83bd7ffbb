"""The bench's C reference recorder (issue 15): built, loaded, and its records read back.

``benchmarks/reference_capture.cpp`` is the least a launch recorder written in C does: set as
``JITFunction.run``, it writes each launch's kernel, grid, clocks and arguments (per tensor its dtype, device,
sizes, strides, storage offset, pointer and bytes) as machine words into a ring, and sends nothing. The bench
runs it beside TileLens (``benchmarks.reference_wrappers``, kind ``"native"``): the difference between the two
is what TileLens's own work (templates, their checks, autotuner frames, the queue to the writer process) costs,
separated from the cost of capturing at all.

It is compiled with TileLens's own compiler command (:func:`tilelens.core.native.command`) into TileLens's
native cache folder, under a name hashed from its source, torch, Python and the flags; never imported by
TileLens itself. Invariant: :func:`records` returns exactly the launches taken since :func:`reset`, decoded
word by word as the C++ wrote them, or raises when the ring was overwritten meanwhile.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tilelens.core import native

SOURCE = Path(__file__).with_name("reference_capture.cpp")
MODULE = "_tilelens_reference_capture"
MARK = 0x7E1E1E5CA9
HEAD = 11  # words before the values (reference_capture.cpp's record layout)
TENSOR, INT, FLOAT, BOOL, NONE, OTHER = 1, 2, 3, 4, 5, 6
NO_NAMES = 65  # the kwnames slot of a call without keyword arguments (kNames + 1)
# c10::ScalarType codes of the dtypes Triton kernels take most.
DTYPES = {
    0: torch.uint8,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.int64,
    5: torch.float16,
    6: torch.float32,
    7: torch.float64,
    11: torch.bool,
    15: torch.bfloat16,
}

_module: Any = None


@dataclass(frozen=True)
class Tensor:
    """A tensor argument as the reference read it."""

    dtype: torch.dtype | int  # the c10 code when not in :data:`DTYPES`
    device: tuple[int, int]  # c10 device type and index
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    storage_offset: int
    storage_pointer: int
    storage_bytes: int


@dataclass(frozen=True)
class Other:
    """An argument that is neither a tensor nor an int/float/bool/None: its address (``id``)."""

    address: int


@dataclass(frozen=True)
class Launch:
    """One recorded call of ``JITFunction.run``: ``values`` holds the positional arguments after ``self``, then
    the keyword arguments in the order of ``names`` (``grid`` among them, as an :class:`Other`)."""

    jit: int  # id() of the JITFunction
    names: tuple[str, ...]
    values: tuple[Any, ...]
    grid: tuple[int, ...] | None  # what a tuple grid holds or a grid function returned; None: not ints
    started: float  # time.time() before the launch
    duration: float  # seconds in the wrapped run

    def keyword(self, name: str) -> Any:
        """The value of keyword argument ``name``."""
        return self.values[len(self.values) - len(self.names) + self.names.index(name)]


def target() -> Path:
    return native.cache_dir() / native.built_name("reference", (SOURCE,), native.FLAGS)


def build() -> Path:
    """The built module's path, compiling it first when needed (RuntimeError with the compiler's output when
    that fails)."""
    out = target()
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    done = subprocess.run(native.command(partial, (SOURCE,)), capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the C reference did not build: {(done.stdout + done.stderr).strip()[-2000:]}")
    os.replace(partial, out)
    return out


def load() -> Any:
    """The module, built when needed, loaded once per program."""
    global _module
    if _module is None:
        spec = importlib.util.spec_from_file_location(MODULE, build())
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _module = module
    return _module


def reset() -> None:
    """Forget the records taken so far."""
    load().reset()


def count() -> int:
    """Launches recorded since :func:`reset` (also those the ring no longer holds)."""
    taken: int = load().count()
    return taken


def records() -> list[Launch]:
    """The launches recorded since :func:`reset`, in order; RuntimeError when the ring was overwritten."""
    taken, wrapped, data, names = load().state()
    if wrapped:
        raise RuntimeError("the reference's ring was overwritten: reset() before fewer launches")
    words = memoryview(data).cast("Q")
    out: list[Launch] = []
    at = 0
    while at < len(words):
        out.append(_launch(words, at, names))
        if words[at + 1] < HEAD:
            raise RuntimeError(f"a record of {words[at + 1]} words at word {at}")
        at += words[at + 1]
    if len(out) != taken:
        raise RuntimeError(f"{len(out)} records read, {taken} taken")
    return out


def _signed(word: int) -> int:
    return word - (1 << 64) if word >= 1 << 63 else word


def _float(word: int) -> float:
    value: float = memoryview(word.to_bytes(8, sys.byteorder)).cast("d")[0]
    return value


def _launch(words: memoryview, at: int, names: tuple[tuple[str, ...], ...]) -> Launch:
    if words[at] != MARK:
        raise RuntimeError(f"no record at word {at}")
    slot, nvalues = words[at + 3], words[at + 4]
    known = words[at + 8]
    grid = tuple(_signed(words[at + 5 + i]) for i in range(known)) if known else None
    values: list[Any] = []
    i = at + HEAD
    for _ in range(nvalues):
        tag = words[i]
        if tag == TENSOR:
            dtype, device_type, index, dims = words[i + 1], words[i + 2], _signed(words[i + 3]), words[i + 4]
            sizes = tuple(_signed(w) for w in words[i + 5 : i + 5 + dims])
            strides = tuple(_signed(w) for w in words[i + 5 + dims : i + 5 + 2 * dims])
            j = i + 5 + 2 * dims
            values.append(
                Tensor(
                    DTYPES.get(dtype, dtype),
                    (device_type, index),
                    sizes,
                    strides,
                    words[j],
                    words[j + 1],
                    words[j + 2],
                )
            )
            i = j + 3
            continue
        word = words[i + 1]
        value = {INT: _signed(word), BOOL: bool(word), NONE: None}.get(tag, word)
        values.append(_float(word) if tag == FLOAT else Other(word) if tag == OTHER else value)
        i += 2
    kw = names[slot] if slot < len(names) else ()
    return Launch(
        words[at + 2], tuple(kw), tuple(values), grid, _float(words[at + 9]), _float(words[at + 10])
    )
