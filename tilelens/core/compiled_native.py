"""What a compiled recording's router (``compiled.CompiledRouter``) hands to the compiled module (issue 15): the
``Launcher`` of ``native_capture.cpp``, its configuration, and the ``Tuner`` of ``native_calls.cpp``.

Split from ``compiled.py``, which routes in Python; this module only wires the router's own state and methods
into the C++ objects that stand in for them. Invariants: the configuration tuple's order is the C++ ``Field``
enum's (``native_capture.cpp``); the launcher is configured only while everything it relies on holds (the
compiled capture, templated launches to a writer, ``snapshots="none"``, a runner that calls the grid with
Triton's bound arguments), else it hands every launch to the router; the writer's queue is handed over only
when ``flat`` is that writer's own ``submit_flat``, whose steps the launcher then does itself.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tilelens.core import compat, native, testid
from tilelens.core.compiled_frames import Frame
from tilelens.core.compiled_kernel import RESERVED_SET, RoutedKernel
from tilelens.core.compiled_templates import FlatPlan
from tilelens.core.thread_state import LOCAL as _THREAD

# Whether a compiled recording leaves Triton's ``Autotuner.run`` as it is and frames the launches it makes from
# its Python frame (where ``compat.AUTOTUNER_RUN_CODE`` allows: Python 3.11 on, Triton's locals as expected).
# False keeps every autotuner call intercepted and framed by the ``Tuner`` (``benchmarks.cost_split``'s ``A``).
# On by default from 3.12, which tells the running code without making a frame object and reads one variable
# in place; 3.11 makes the caller's frame object for every launch and all its locals for an autotuned one,
# which costs more than the interception saves (the CPU stand-in step, 3.11: 20.7 against 19.9 µs a launch).
# The tests switch it on wherever it works.
CALLER_FRAMES = sys.version_info >= (3, 12)


def calls(router: Any, module: Any) -> tuple[Any, Any]:
    """The router's ``Launcher`` (unconfigured: see :func:`launcher_config`) and its ``Tuner`` (configured:
    it frames what ``tune`` would, from the router's tuner plans and thread-local stack; and, where
    :data:`CALLER_FRAMES` allows, the launches Triton's ``Autotuner.run`` makes, read from its frame)."""
    launcher = module.Launcher(router.launch)
    tuner = module.Tuner(router.tune)
    run = router._tuner_run = router._tuner_run or router._original(compat.Autotuner)
    framed = (router._tuner_plans, router._local, run, router._tuned, Frame, RESERVED_SET)
    code = compat.AUTOTUNER_RUN_CODE if CALLER_FRAMES else None
    if code is None:
        tuner.configure(*framed)
    else:
        tuner.configure(*framed, code, router._after_caller_tuner, router._stack)
    router._tuner_callers = code is not None  # what ``caller_tuner`` says, for this tuner's whole life
    return launcher, tuner


def launcher_config(router: Any) -> tuple[Any, ...] | None:
    """The launcher's ``configure`` arguments while its conditions hold, else None (it is disabled)."""
    module = native.module_of(router._capture)
    if (
        module is None
        or router.flat is None
        or router.policy.mode != "none"
        or not router._binds_like_triton()
    ):
        return None
    return (
        router._launch,
        router._after,
        router._kernels,
        router._metadata_cache,
        router._grids,
        router._local,
        router._templates,
        router.flat,
        router.runner,
        router._grid_of,
        testid,
        _THREAD,
        time.time,
        time.perf_counter,
        router._original(compat.JITFunction) if router.runner is compat.run_compiled else None,
        queue_parts(router.flat),
        Frame,
        RoutedKernel,
        FlatPlan,
    )


def queue_parts(flat: Any) -> tuple[Any, ...] | None:
    """``flat_parts()`` of the writer whose own ``submit_flat`` ``flat`` is (the launcher then queues a launch
    as ``submit_flat`` does, without its Python frame); None for any other callable (a stand-in, a benchmark's
    replacement): the launcher calls ``flat`` then."""
    writer = getattr(flat, "__self__", None)
    parts = getattr(writer, "flat_parts", None)
    if parts is None or getattr(flat, "__func__", None) is not getattr(type(writer), "submit_flat", None):
        return None
    got: tuple[Any, ...] = parts()
    return got
