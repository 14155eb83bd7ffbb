"""The adversarial figures of issue 47, measured again: escapes, signals, bad input, serve's Host check.

    python scripts/adversarial_round3.py [--signals N] [--skip-postgres]

Counts, for each family, how many attempts were made and how many came out as they must:

- ``sql`` escapes on PostgreSQL (the ESCAPES list of tests/unit/test_pg_gate_allowlist.py, against a
  throwaway server started as in the tests; the server user is a superuser): refused, no file read, the
  bystander backend alive, no advisory lock taken, no row changed;
- signals landing in a ``__del__``, a weakref callback or an ``except BaseException`` (SIGTERM, SIGINT,
  SIGHUP; N rounds): the run stored interrupted/terminated with 130/128+N, the process ending the same way,
  no launch after the signal;
- bad input to the commands (gc ages, wildcards, tolerances, empty SQL, ...): exit 2, one line, no traceback;
- ``serve`` requests with a foreign Host header, bad parameters: 400, no history data in the answer.

Exits 1 if anything came out otherwise. Reuses the tests' helpers, so it runs from the repository root.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def escapes() -> tuple[int, int]:
    from tests import store_helpers
    from tests.postgres import PostgresServer, find_bindir
    from tests.unit.test_pg_gate_allowlist import ESCAPES
    from tilelens.config import resolve_location
    from tilelens.errors import QueryError, ReadOnlyError
    from tilelens.store import History
    from tilelens.store.sql import libpq
    from tilelens.store.sql.readonly import open_reader
    from tilelens.store.sql.urls import postgres_connect_args

    bindir = find_bindir()
    if bindir is None:
        print("escapes: no PostgreSQL server binaries; skipped")
        return 0, 0
    server = PostgresServer(bindir)
    server.start()
    refused = 0
    try:
        url = server.url(server.create_database("adv"))
        with (
            tempfile.TemporaryDirectory() as tmp,
            History.open(location=resolve_location(url, Path(tmp) / "blobs", env={})) as h,
        ):
            run = h.begin_run(store_helpers.run_info(tag="adv"))
            h.write_launch(run, store_helpers.launch(trace=store_helpers.trace_table()))
            h.finish_run(run, "ok", 0)
            before = h.counts()
            bystander = libpq.Connection(postgres_connect_args(url))
            pid = bystander.scalar("SELECT pg_backend_pid()")
            hostname = socket.gethostname()
            for statement in ESCAPES:
                text = statement.replace("{pid}", str(pid))
                with open_reader(h.location) as r:
                    try:
                        rows = r.execute(text).rows
                        print(f"  ESCAPED: {text!r} -> {rows!r}")
                        continue
                    except (ReadOnlyError, QueryError) as exc:
                        ok = hostname not in str(exc)
                ok = ok and bystander.scalar("SELECT 1") == "1"
                ok = ok and bystander.scalar("SELECT count(*) FROM pg_locks WHERE locktype='advisory'") == "0"
                ok = ok and h.counts() == before
                refused += ok
                if not ok:
                    print(f"  NOT CLEAN: {text!r}")
            bystander.close()
    finally:
        server.stop()
    print(f"escapes: {refused}/{len(ESCAPES)} refused with nothing read, changed, locked or terminated")
    return refused, len(ESCAPES)


def signals(rounds: int) -> tuple[int, int]:
    import sqlalchemy as sa

    from tests.end_to_end.conftest import tilelens_argv
    from tests.end_to_end.test_cli_record import KERNEL
    from tests.end_to_end.test_signal_contract import SWALLOWING

    good = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "kernels.py").write_text(KERNEL)
        (folder / "prog.py").write_text(SWALLOWING)
        for i in range(rounds):
            for where in ("del", "weakref", "except"):
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    db = folder / f"h{i}-{where}-{sig.name}.db"
                    proc = subprocess.Popen(
                        [*tilelens_argv(), "--db", str(db), "record", str(folder / "prog.py"), where],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder,
                    )  # fmt: skip
                    assert proc.stdout is not None
                    line = proc.stdout.readline()
                    if line != "inside\n":
                        proc.kill()
                        proc.communicate()
                        total += 1
                        print(f"  {where}/{sig.name}: no 'inside' ({line!r})")
                        continue
                    proc.send_signal(sig)
                    _out, err = proc.communicate(timeout=300)
                    engine = sa.create_engine(f"sqlite:///{db}")
                    with engine.connect() as conn:
                        row = conn.execute(sa.text("SELECT status, exit_code FROM runs")).one()
                        launches = conn.execute(sa.text("SELECT count(*) FROM launches")).scalar_one()
                    engine.dispose()
                    want = (
                        (130, ("interrupted", 130))
                        if sig == signal.SIGINT
                        else (-sig, ("terminated", 128 + sig))
                    )
                    ok = proc.returncode == want[0] and tuple(row) == want[1] and launches == 1
                    ok = ok and "Exception ignored" not in err
                    total += 1
                    good += ok
                    if not ok:
                        print(
                            f"  {where}/{sig.name}: rc {proc.returncode}, run {tuple(row)}, {launches} launches"
                        )
    print(f"signals: {good}/{total} ended the run as the signal, nothing recorded after it")
    return good, total


BAD_INPUT = [
    ["gc", "--older-than", "99999999999d"],
    ["gc", "--older-than", "3000000d"],
    ["gc", "--older-than", "999999w"],
    ["gc", "--older-than", "0001-01-01"],
    ["gc", "--grace", "99999999999d"],
    ["ls", "--kernel", "*" * 5000],
    ["replay", "--kernel", "*" * 5000],
    ["trace", "--kernel", "*" * 5000],
    ["diff", "--kernel", "*" * 5000, "--source-sha", "a", "b"],
    ["replay", "1", "--atol", "-1"],
    ["replay", "1", "--atol", "nan"],
    ["replay", "1", "--rtol", "inf"],
    ["sql", ""],
    ["sql", ";"],
    ["db", "grant-reader", "x; DROP TABLE runs"],
]


def bad_input() -> tuple[int, int]:
    from tests.end_to_end.conftest import tilelens_in_process

    good = 0
    with tempfile.TemporaryDirectory() as tmp:
        where = ["--db", str(Path(tmp) / "h.db"), "--blobs", str(Path(tmp) / "blobs")]
        assert tilelens_in_process(*where, "db", "upgrade").returncode == 0
        for args in BAD_INPUT:
            res = tilelens_in_process(*where, *args)
            lines = res.stderr.strip().splitlines()
            ok = res.returncode == 2 and len(lines) == 1 and lines[0].startswith("tilelens: error: ")
            good += ok
            if not ok:
                print(f"  {args[:3]}: exit {res.returncode}, {res.stderr[:200]!r}")
    print(f"bad input: {good}/{len(BAD_INPUT)} one line, exit 2")
    return good, len(BAD_INPUT)


def serve_requests() -> tuple[int, int]:
    from starlette.testclient import TestClient

    from tests import store_helpers
    from tilelens.config import resolve_location
    from tilelens.store import History
    from tilelens.web.app import create_app

    hosts = ["evil.example.com", "127.0.0.1.nip.io", "localhost.", "attacker:8765", "[::2]", ""]
    paths = ["/", "/launches", "/api/launches/1", "/api/launches/1/heatmaps", "/kernels/1"]
    bad = ["/api/launches/1/heatmaps?width=99999999999999999999", "/api/launches/1/heatmaps?width=0",
           "/launches?oob=abc", "/launches?kernel=" + "*" * 5000]  # fmt: skip
    good = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        location = resolve_location(str(Path(tmp) / "h.db"), Path(tmp) / "blobs", env={})
        with History.open(location=location) as h:
            run = h.begin_run(store_helpers.run_info(tag="secret-tag"))
            h.write_launch(run, store_helpers.launch(trace=store_helpers.trace_table()))
            h.finish_run(run, "ok", 0)
        client = TestClient(create_app(location), base_url="http://127.0.0.1:8765")
        for host in hosts:
            for path in paths:
                r = client.get(path, headers={"Host": host})
                total += 1
                good += r.status_code == 400 and "secret-tag" not in r.text
        for path in bad:
            r = client.get(path)
            total += 1
            good += r.status_code == 400
    print(f"serve: {good}/{total} foreign-Host or bad-parameter requests answered 400, no history data")
    return good, total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signals", type=int, default=1, help="rounds of the 9 signal cases (default 1)")
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()
    os.chdir(ROOT)
    results = [bad_input(), serve_requests(), signals(args.signals)]
    if not args.skip_postgres:
        results.append(escapes())
    return 0 if all(good == total for good, total in results) else 1


if __name__ == "__main__":
    sys.exit(main())
