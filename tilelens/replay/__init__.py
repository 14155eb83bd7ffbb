"""Replay recorded launches on the CPU (Triton's interpreter) or a CUDA device (compiled Triton), and verify them.

``replay_launch(history, launch_id, device="cpu")`` rebuilds the launch's arguments from their snapshots
(aliasing included), finds the kernel, runs its innermost ``JITFunction`` with the recorded config and grid, and
compares outputs (and, on the CPU, the access trace) with the record. ``tilelens replay`` is a thin layer over
these functions.
"""

from tilelens.errors import LaunchNotFoundError
from tilelens.replay.compare import default_tolerance, uses_dot, uses_tf32_dot
from tilelens.replay.engine import parse_device, replay_launch, replay_launches
from tilelens.replay.resolve import KernelResolver
from tilelens.replay.result import ReplayFailure, ReplayResult, TensorDiff, TraceDiff, Writer
from tilelens.store.read.launches import select_launches

__all__ = [
    "KernelResolver",
    "LaunchNotFoundError",
    "ReplayFailure",
    "ReplayResult",
    "TensorDiff",
    "TraceDiff",
    "Writer",
    "default_tolerance",
    "parse_device",
    "replay_launch",
    "replay_launches",
    "select_launches",
    "uses_dot",
    "uses_tf32_dot",
]
