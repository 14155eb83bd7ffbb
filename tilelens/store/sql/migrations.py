"""Where the Alembic migrations this code ships are: the package ``tilelens._migrations``.

The repository keeps them in its top-level ``migrations/`` folder (where ``alembic.ini`` points) and
``tilelens/_migrations`` links to it, so a checkout, an editable install and an installed wheel all hold them
inside the package. They are found through the imported package, never through a path relative to a
checkout: a wheel installed in ``site-packages`` has no checkout around it.

Importing this module costs one tiny package import (a docstring); it imports neither Alembic nor
SQLAlchemy, so the read-only path can list the known revisions cheaply.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from tilelens.errors import HistoryError

PACKAGE = "tilelens._migrations"


@lru_cache(maxsize=1)
def migrations_dir() -> Path:
    """The Alembic script folder (``env.py``, ``versions/``) inside the installed package."""
    try:
        import tilelens._migrations as package
    except ImportError as exc:
        raise HistoryError(
            f"this TileLens installation has no migrations ({PACKAGE}: {exc}); reinstall it"
        ) from exc
    location = Path(package.__file__).parent if package.__file__ else None
    if location is None or not (location / "env.py").is_file():
        raise HistoryError(
            f"this TileLens installation has no migrations ({PACKAGE} has no env.py); reinstall it"
        )
    return location


def versions_dir() -> Path:
    """The folder of revision files (``versions/`` of :func:`migrations_dir`)."""
    return migrations_dir() / "versions"
