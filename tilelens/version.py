"""TileLens's version, and the versions of everything a recording or a replay ran with.

Its own module so that anything may import it: ``tilelens/__init__`` does, and so do the recorder and replay,
which keep these versions with every run and replay row. It imports nothing from TileLens.
"""

from __future__ import annotations

import platform

__version__ = "0.1.0"


def versions() -> dict[str, str]:
    """TileLens, Triton, torch, numpy and Python versions; imports torch and Triton (seconds, once)."""
    import numpy
    import torch
    import triton

    return {
        "tilelens": __version__,
        "triton": triton.__version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }
