"""``python -m tilelens``: the same command line as the ``tilelens`` console script."""

from __future__ import annotations

import sys

from tilelens.cli import main

if __name__ == "__main__":
    sys.exit(main())
