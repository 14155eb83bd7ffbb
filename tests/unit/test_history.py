"""History writes: one call per launch, blobs before rows, rows in one transaction, safe under crashes."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
import torch
from sqlalchemy import select

from tests import store_helpers
from tilelens.config import Location
from tilelens.store import History, HistoryError
from tilelens.store.files.jsonvalues import from_json
from tilelens.store.sql.models import AutotuneEventRow, Blob, Kernel, Launch, LaunchArg, Replay, Run

REPO = Path(__file__).resolve().parents[2]


def test_launch_rows_and_blobs(history: History) -> None:
    run = history.begin_run(store_helpers.run_info(tag="t"))
    x = torch.randn(32)
    out_before, out_after = torch.zeros(32), torch.randn(32)
    rec = store_helpers.launch(x, out_before, out_after, trace=store_helpers.trace_table(8), seq=3)
    launch_id = history.write_launch(run, rec)

    with history.session() as s:
        launch = s.get(Launch, launch_id)
        assert launch is not None
        assert (launch.run_id, launch.seq, launch.grid, launch.status, launch.role) == (
            run,
            3,
            (4, 1, 1),
            "ok",
            "launch",
        )
        assert (
            launch.kernel.qualname == "add_kernel" and launch.kernel.source_sha256 == rec.kernel.source_sha256
        )
        assert launch.cache_key == rec.kernel.cache_key
        assert (launch.loads, launch.stores, launch.bytes_loaded, launch.oob_lanes) == (4, 4, 64, 0)
        assert launch.config == {"BLOCK": 4, "num_warps": 4}
        assert launch.started_at == rec.started_at and launch.started_at.tzinfo is not None
        assert launch.trace_rows == 8
        assert launch.trace_bytes == history.blobs.path(launch.trace_blob).stat().st_size
        assert history.blobs.get_table(launch.trace_blob).equals(rec.trace)

        args = {a.name: a for a in launch.args}
        assert [a.position for a in launch.args] == [0, 1, 2, 3]
        assert args["x_ptr"].after_blob == args["x_ptr"].before_blob  # unchanged input
        assert not args["x_ptr"].changed and args["out_ptr"].changed
        assert torch.equal(history.blobs.get_tensor(args["x_ptr"].before_blob), x)
        assert torch.equal(history.blobs.get_tensor(args["out_ptr"].before_blob), out_before)
        assert torch.equal(history.blobs.get_tensor(args["out_ptr"].after_blob), out_after)
        assert args["out_ptr"].shape == [32] and args["out_ptr"].strides == [1]
        assert args["n"].value == 32 and args["n"].before_blob is None and args["BLOCK"].kind == "constexpr"
        if hasattr(rec, "per_arg"):
            assert args["x_ptr"].access["load_lanes"] == 16 and args["n"].access is None

        blobs = {b.sha256: b for b in s.scalars(select(Blob))}
        referenced = (
            {launch.trace_blob} | {a.before_blob for a in launch.args} | {a.after_blob for a in launch.args}
        )
        assert set(blobs) == referenced - {None}
        assert blobs[launch.trace_blob].kind == "trace" and blobs[launch.trace_blob].rows == 8
        assert blobs[args["x_ptr"].before_blob].kind == "tensor"
        assert all(b.size == history.blobs.path(b.sha256).stat().st_size for b in blobs.values())


def test_blob_files_exist_before_their_rows_are_inserted(history: History) -> None:
    seen: list[str] = []

    def check(conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        if statement.lstrip().upper().startswith("INSERT INTO BLOBS"):
            for params in context.compiled_parameters:
                assert history.blobs.path(params["sha256"]).is_file(), "row written before its blob"
                seen.append(params["sha256"])

    sa.event.listen(history.engine, "before_cursor_execute", check)
    run = history.begin_run(store_helpers.run_info())
    history.write_launch(
        run,
        store_helpers.launch(
            torch.randn(8), torch.zeros(8), torch.ones(8), trace=store_helpers.trace_table()
        ),
    )
    assert len(seen) == 4  # x, out before, out after, trace


def test_kernel_rows_are_shared_per_source_version(history: History) -> None:
    run = history.begin_run(store_helpers.run_info())
    k1, k2 = store_helpers.kernel(), store_helpers.kernel(source="def add_kernel(): pass  # edited")
    ids = [
        history.write_launch(run, store_helpers.launch(k=k, seq=i)) for i, k in enumerate([k1, k1, k2, k1])
    ]
    with history.session() as s:
        kernel_ids = [s.get(Launch, i).kernel_id for i in ids]
        assert s.scalar(select(sa.func.count()).select_from(Kernel)) == 2
    assert kernel_ids[0] == kernel_ids[1] == kernel_ids[3] != kernel_ids[2]


def test_identical_tensors_are_one_blob_across_launches(history: History) -> None:
    run = history.begin_run(store_helpers.run_info())
    x = torch.randn(1000)
    for i in range(3):
        history.write_launch(run, store_helpers.launch(x.clone(), seq=i))
    counts = history.counts()
    assert counts["launch_args"] == 12
    assert counts["blobs"] == 2  # x and the zero-filled out tensor


def test_config_values_that_json_cannot_hold_are_kept(history: History) -> None:
    run = history.begin_run(store_helpers.run_info())
    config = {"scale": float("nan"), "limit": float("-inf"), "shape": (2, 3), "dtype": torch.float16}
    launch_id = history.write_launch(run, store_helpers.launch(config=config))
    with history.session() as s:
        stored = s.get(Launch, launch_id).config
    decoded = from_json(stored)
    assert decoded["limit"] == float("-inf") and decoded["scale"] != decoded["scale"]
    assert decoded["shape"] == [2, 3]
    assert decoded["dtype"] == {"$type": "torch.dtype", "$repr": "torch.float16"}


def test_run_lifecycle(history: History) -> None:
    run = history.begin_run(store_helpers.run_info(tag="nightly"))
    with history.session() as s:
        row = s.get(Run, run)
        assert (row.status, row.tag, row.pid, row.finished_at) == ("running", "nightly", os.getpid(), None)
    history.finish_run(run, "failed", exit_code=3)
    with history.session() as s:
        row = s.get(Run, run)
        assert (row.status, row.exit_code) == ("failed", 3)
        assert row.finished_at >= row.started_at
    with pytest.raises(ValueError, match="status"):
        history.finish_run(run, "weird")  # type: ignore[arg-type]
    with pytest.raises(HistoryError, match="no run 999"):
        history.finish_run(999, "ok")


def test_autotune_event(history: History) -> None:
    run = history.begin_run(store_helpers.run_info())
    launch_id = history.write_launch(run, store_helpers.launch())
    ev = store_helpers.autotune_event()
    event_id = history.write_autotune_event(run, ev, launch_id=launch_id)
    no_timings = store_helpers.autotune_event()
    no_timings.timings = None
    other = history.write_autotune_event(run, no_timings)
    with history.session() as s:
        row = s.get(AutotuneEventRow, event_id)
        assert row.kernel.qualname == "add_kernel" and row.launch_id == launch_id
        assert row.chosen == ev.chosen and row.configs == ev.configs and row.timings == ev.timings
        assert s.get(AutotuneEventRow, other).timings is None
        assert s.scalar(select(sa.func.count()).select_from(Kernel)) == 1


def test_replay_rows(history: History) -> None:
    run = history.begin_run(store_helpers.run_info())
    launch_id = history.write_launch(run, store_helpers.launch())
    rid = history.write_replay(
        launch_id, outcome="mismatch", device="cpu", backend="interpreter", max_abs_err=float("nan"),
        max_rel_err=0.5, trace_equal=False, message="3 elements differ", duration_s=0.2,
    )  # fmt: skip
    with history.session() as s:
        row = s.get(Replay, rid)
        assert (row.outcome, row.max_abs_err, row.max_rel_err, row.trace_equal) == (
            "mismatch",
            None,
            0.5,
            False,
        )
        assert row.created_at.tzinfo is not None
    with pytest.raises(ValueError, match="outcome"):
        history.write_replay(launch_id, outcome="close", device="cpu", backend="x")  # type: ignore[arg-type]


def test_failed_transaction_writes_no_rows(history: History) -> None:
    with pytest.raises(sa.exc.IntegrityError):
        history.write_launch(12345, store_helpers.launch())  # no such run: the foreign key refuses it
    counts = history.counts()
    assert counts["launches"] == counts["launch_args"] == counts["blobs"] == counts["kernels"] == 0


def test_naive_datetimes_are_refused(history: History) -> None:
    info = store_helpers.run_info()
    info.started_at = dt.datetime(2026, 1, 1)
    with pytest.raises(sa.exc.StatementError, match="naive"):
        history.begin_run(info)


def test_history_open_resolves_like_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TILELENS_DB", str(tmp_path / "env.db"))
    monkeypatch.delenv("TILELENS_BLOBS")
    with History.open() as h:
        assert h.location == Location(f"sqlite:///{tmp_path}/env.db", tmp_path / "blobs")
        assert h.blobs.root == tmp_path / "blobs"


# -- several processes -----------------------------------------------------------------------------------


def _writer(db: Path | str, count: int, seed: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store_writer", str(db), str(count), str(seed)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _check_every_reference(history: History) -> int:
    """Every blob any row names is known to ``blobs``, exists, and hashes to its name. Returns launch count."""
    if history.engine.dialect.name == "sqlite":  # PostgreSQL enforces foreign keys itself, always
        with history.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []
    with history.session() as s:
        referenced = set(s.scalars(select(Launch.trace_blob)))
        referenced |= set(s.scalars(select(LaunchArg.before_blob))) | set(
            s.scalars(select(LaunchArg.after_blob))
        )
        referenced.discard(None)
        known = set(s.scalars(select(Blob.sha256)))
        launches = s.scalar(select(sa.func.count()).select_from(Launch))
    assert referenced <= known
    for sha in known:
        history.blobs.verify(sha)
    return launches


def test_concurrent_writers_on_one_fresh_history(history_url: str) -> None:
    """Three writers create one history at once: one migrates, the others wait and find it done (on
    PostgreSQL through an advisory lock; without it the second CREATE TABLE failed)."""
    db = history_url
    procs = [_writer(db, 5, seed) for seed in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with History.open(db) as h:
        assert _check_every_reference(h) == 15
        with h.session() as s:
            assert set(s.scalars(select(Run.status))) == {"ok"}


def _kill_at_random_moments(db: Path | str, writers: int, rng: random.Random, first_seed: int) -> None:
    procs = [_writer(db, 0, first_seed + i) for i in range(writers)]
    try:
        for p in procs:  # each has committed its first launch once it says "ready"
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", p.stderr.read() if p.stderr else ""
        start = time.monotonic()
        for p, delay in sorted(((p, rng.uniform(0.0, 0.4)) for p in procs), key=lambda pd: pd[1]):
            time.sleep(max(0.0, start + delay - time.monotonic()))
            p.send_signal(signal.SIGKILL)
    finally:
        for p in procs:
            p.kill()
            p.communicate()
    assert all(p.returncode == -signal.SIGKILL for p in procs)


def test_killed_writers_leave_no_dangling_reference(tmp_path: Path) -> None:
    """SIGKILL concurrent writers at random moments (mid-blob, mid-transaction, between launches), then audit.

    Two rounds of three writers. Random kills only sometimes land in a bad window (with blobs written after
    their rows, this fails in about four runs of five), so the ordering itself is also checked
    deterministically by test_blob_files_exist_before_their_rows_are_inserted.
    """
    db = tmp_path / "h.db"
    rng = random.Random(os.getpid())
    for round_ in range(2):
        _kill_at_random_moments(db, 3, rng, first_seed=10 * round_)

    with History.open(str(db)) as h:
        launches = _check_every_reference(h)
        assert launches >= 6
        with h.session() as s:
            assert set(s.scalars(select(Run.status))) == {"running"}  # killed, never finished
            last = s.scalars(select(Launch).order_by(Launch.id.desc())).first()
            for arg in last.args:
                if arg.before_blob:
                    h.blobs.get_tensor(arg.before_blob)
        # The history stays writable after the crashes.
        run = h.begin_run(store_helpers.run_info())
        h.write_launch(run, store_helpers.launch())


def test_openers_racing_on_an_empty_database_all_succeed(history_url: str, tmp_path: Path) -> None:
    """Six openers released at once onto one empty database: one creates the schema, the others find it."""
    import threading

    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def open_it() -> None:
        barrier.wait()
        try:
            History.open(history_url, tmp_path / "blobs").close()
        except BaseException as exc:  # noqa: BLE001  # collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with History.open(history_url, tmp_path / "blobs") as h:
        assert h.counts()["runs"] == 0
