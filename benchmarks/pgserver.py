"""A throwaway PostgreSQL server for the benchmarks: the tests' (tests/postgres.py), with fsync on.

The many-recorders and history-scale benchmarks need a server to measure; this starts one in a temp folder
(unix socket only, as the ``postgres`` user when run as root) and stops it afterwards. Unlike the tests' server
it keeps PostgreSQL's durability settings, so commit costs are those of a real server on this disk.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tests.postgres import PostgresServer, find_bindir, missing_reason


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[PostgresServer]:
    reason = missing_reason()
    if reason is not None:
        raise SystemExit(f"PostgreSQL benchmarks need a server: {reason}")
    bindir = find_bindir()
    assert bindir is not None
    server = PostgresServer(bindir, durable=True)
    try:
        server.start()
        yield server
    finally:
        server.stop()
