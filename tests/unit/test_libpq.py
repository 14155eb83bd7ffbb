"""The read path's own libpq connection gives the values psycopg gave, and takes no driver import.

``tilelens sql`` on PostgreSQL reads through :mod:`tilelens.store.sql.libpq` (ctypes); before, it read through
psycopg, whose values were then made SQLite-like. These tests pin that the text conversions give exactly what
psycopg's loaders plus that normalisation gave, type by type, on a real server.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.postgres import PostgresServer
from tilelens.config import resolve_location
from tilelens.store import History
from tilelens.store.sql import libpq
from tilelens.store.sql.readonly import open_reader

ROOT = Path(__file__).resolve().parents[2]

EXPRESSIONS = [
    "1::int2", "-7::int4", "9223372036854775807::int8", "42::oid",
    "1.5::float4", "0.1::float8", "'NaN'::float8", "'-Infinity'::float8", "1e300::float8",
    "2.50::numeric", "3.000::numeric", "-12345678901234567890::numeric", "'NaN'::numeric",
    "true", "false",
    "'{\"a\": [1, 2.5, null], \"b\": \"é\"}'::jsonb", "'5'::json", "'-2.5e3'::jsonb", "'\"s\"'::json",
    "timestamptz '2026-01-02 03:04:05.5+02'", "timestamptz '2026-01-02 03:04:05+05:30'",
    "timestamp '2026-01-02 03:04:05'", "timestamp '2026-01-02 03:04:05.000123'",
    "date '2026-01-02'", "time '01:02:03.25'", "time '23:59:59'", "timetz '01:02:03+02'",
    "interval '1 day 02:03:04.5'", "interval '-3 hours'", "interval '2 mons 1 day'", "interval '1 year'",
    "'\\x00ff10'::bytea", "''::bytea",
    "ARRAY[1, 2, NULL]", "ARRAY[['a b', 'c\"d'], ['e,f', 'NULL']]", "ARRAY[true, false]",
    "ARRAY[1.5, 2]::numeric[]", "ARRAY['{\"k\": 1}']::jsonb[]", "'{}'::int[]",
    "'a70f2ad4-4b5f-4a8e-9b0a-3f1c2d4e5f60'::uuid", "'naïve ✓ text'", "NULL::text", "''::text",
    "'x'::name", "'ab'::char(3)",
]  # fmt: skip


def _plain(value: Any) -> Any:
    """What the read path made of psycopg's values before (SQLite's forms)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return float(value)
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return json.dumps([_plain_item(v) for v in value])
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.timedelta):
        return str(value)
    return value


def _plain_item(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain_item(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return _plain(value)
    return value


@pytest.fixture
def pg_database(postgres_server: PostgresServer, tmp_path: Path) -> str:
    name = postgres_server.create_database()
    History.open(postgres_server.url(name), tmp_path / "blobs").close()
    return name


@pytest.fixture
def pg_history(postgres_server: PostgresServer, pg_database: str) -> str:
    return postgres_server.url(pg_database)


def test_every_type_reads_as_psycopg_read_it(
    pg_history: str, pg_database: str, postgres_server: PostgresServer
) -> None:
    import psycopg
    from psycopg.types.string import TextLoader

    query = "SELECT " + ", ".join(f"{e} AS c{i}" for i, e in enumerate(EXPRESSIONS))
    with psycopg.connect(host=str(postgres_server.socket_dir), user="postgres", dbname=pg_database) as conn:
        for name in ("json", "jsonb"):  # JSON as its stored text
            conn.adapters.register_loader(name, TextLoader)
        (raw,) = conn.execute(query).fetchall()
    expected = [_plain(v) for v in raw]
    for i, e in enumerate(EXPRESSIONS):  # psycopg loads JSON as text; SQLite's affinity makes 5 a number
        if "json" in e and "[]" not in e and isinstance(expected[i], str):
            expected[i] = libpq.json_number(expected[i])
    with open_reader(resolve_location(pg_history, env={})) as reader:
        (got,) = reader.execute(query).rows
    mismatched = [(e, g, x) for e, g, x in zip(EXPRESSIONS, got, expected) if g != x and g == g]
    assert mismatched == []
    assert got[EXPRESSIONS.index("'NaN'::float8")] != got[EXPRESSIONS.index("'NaN'::float8")]  # NaN is NaN
    assert got[EXPRESSIONS.index("'\\x00ff10'::bytea")] == b"\x00\xff\x10"
    assert got[EXPRESSIONS.index("ARRAY[1, 2, NULL]")] == "[1, 2, null]"


def test_parameters_are_typed_and_reused(pg_history: str) -> None:
    with open_reader(resolve_location(pg_history, env={})) as reader:
        rows = reader.execute(
            "SELECT :a + 1 AS n, :a * 2 AS m, :s || 'x' AS s, :f AS f, :b AS b, CAST(:z AS text) IS NULL AS z, :big AS big",
            {"a": 20, "s": "it's", "f": 0.25, "b": b"\x01\x02", "z": None, "big": 2**70},
        ).rows
    assert rows == [(21, 40, "it'sx", 0.25, b"\x01\x02", 1, 2**70)]


def test_reading_postgresql_imports_no_driver(pg_history: str, tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from tilelens.cli import main\n"
        f"assert main(['--db', {pg_history!r}, '--blobs', {str(tmp_path / 'blobs')!r}, 'ls']) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_binary', 'sqlalchemy')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
