"""What this installation can do, in one report (``tilelens doctor``): versions, the history it would use, the
optional extras present, and whether compiled recordings read tensor metadata natively or in Python, and why.

Nothing here builds, creates or migrates anything, and torch and Triton are imported only to ask their
versions (seconds, once).
"""

from __future__ import annotations

import importlib.util
import platform
import shutil
from dataclasses import dataclass, field
from typing import Any

from tilelens.config import resolve_location

# extra -> (the module it brings, what it is for)
EXTRAS: dict[str, tuple[str, str]] = {
    "heatmap": ("matplotlib", "show --heatmap PNGs"),
    "serve": ("uvicorn", "tilelens serve"),
    "duckdb": ("duckdb", "SQL over trace_events"),
    "postgres": ("psycopg", "histories on PostgreSQL"),
}


@dataclass
class Environment:
    versions: dict[str, str]
    history: dict[str, Any]
    extras: dict[str, bool] = field(default_factory=dict)
    native: str = ""
    compiler: str | None = None
    cuda: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "versions": self.versions,
            "history": self.history,
            "extras": self.extras,
            "native": self.native,
            "compiler": self.compiler,
            "cuda": self.cuda,
        }


def describe_environment(db: str | None = None, blobs: str | None = None) -> Environment:
    from tilelens.core import native
    from tilelens.version import versions

    found = versions()
    found["python"] = f"{platform.python_version()} ({platform.python_implementation()})"
    location = resolve_location(db, blobs)
    history: dict[str, Any] = {"db": location.display_url(), "blobs": str(location.blobs_dir)}
    path = location.sqlite_path
    if path is not None:
        history["exists"] = path.exists()
    import torch

    return Environment(
        versions=found,
        history=history,
        extras={name: importlib.util.find_spec(module) is not None for name, (module, _) in EXTRAS.items()},
        native=native.describe(),
        compiler=shutil.which("c++") or shutil.which("g++") or shutil.which("clang++"),
        cuda=bool(torch.cuda.is_available()),
    )
