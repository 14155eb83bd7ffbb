"""``python -m tilelens.core.native [build [--force] | status]``: what a background build runs."""

import sys

from tilelens.core.native import main

raise SystemExit(main(sys.argv[1:]))
