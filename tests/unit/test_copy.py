"""``copy_history`` / ``tilelens db copy``: runs move between SQLite and PostgreSQL whole, once, with new ids."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from sqlalchemy import select

from tests import store_helpers
from tests.conftest import new_history_url
from tilelens.cli import main
from tilelens.config import resolve_location
from tilelens.errors import BlobCorruptError, BlobMissingError, RunNotFoundError
from tilelens.store import History
from tilelens.store.admin.copy import copy_history
from tilelens.store.sql.models import AutotuneEventRow, Blob, Kernel, Launch, LaunchArg, Replay, Run

PAIRS = [("sqlite", "postgresql"), ("postgresql", "sqlite")]
T0 = dt.datetime(2026, 5, 4, 3, 2, 1, 123456, tzinfo=dt.timezone.utc)


def _open(backend: str, folder: Path, request: pytest.FixtureRequest) -> History:
    url = new_history_url(backend, folder, request)
    return History.open(location=resolve_location(url, folder / "blobs", env={}))


@pytest.fixture(params=PAIRS, ids=lambda p: f"{p[0]}-to-{p[1]}")
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[History, History]]:
    src = _open(request.param[0], tmp_path / "src", request)
    dst = _open(request.param[1], tmp_path / "dst", request)
    try:
        yield src, dst
    finally:
        src.close()
        dst.close()


def _record(h: History, tag: str, launches: int = 3, seed: int = 0) -> int:
    """A run with launches of two kernel versions, a trace, an autotune event and a replay."""
    gen = torch.Generator().manual_seed(seed)
    run = h.begin_run(store_helpers.run_info(tag=tag))
    ids = []
    for i in range(launches):
        k = store_helpers.kernel(source=f"def add_kernel(): ...  # v{i % 2}")
        x = torch.randn(32, generator=gen)
        rec = store_helpers.launch(
            x, torch.zeros(32), x * 2, k=k, trace=store_helpers.trace_table(4 + i), seq=i,
            config={"BLOCK": 4 * (i + 1), "nan": float("nan")}, started_at=T0 + dt.timedelta(seconds=i),
        )  # fmt: skip
        ids.append(h.write_launch(run, rec))
    h.write_autotune_event(
        run, store_helpers.autotune_event(store_helpers.kernel(source="def add_kernel(): ...  # v0")), ids[0]
    )
    h.write_replay(
        ids[-1], outcome="match", device="cpu", backend="interpreter", trace_equal=True, created_at=T0
    )
    h.finish_run(run, "ok", 0)
    return run


def content(h: History) -> dict[str, Any]:
    """Everything a history holds, by identity instead of id: what a faithful copy must reproduce."""
    out: dict[str, Any] = {}
    with h.session() as s:
        kernels = {
            k.id: (k.module, k.qualname, k.source_sha256, k.file, k.def_line, k.source)
            for k in s.scalars(select(Kernel))
        }
        for run in s.scalars(select(Run).order_by(Run.id)):
            launches = list(s.scalars(select(Launch).where(Launch.run_id == run.id).order_by(Launch.id)))
            index = {launch.id: i for i, launch in enumerate(launches)}

            def launch_row(launch: Launch) -> tuple[Any, ...]:
                args = [
                    (
                        a.position,
                        a.name,
                        a.kind,
                        a.dtype,
                        a.shape,
                        a.strides,
                        a.value,
                        a.access,
                        a.before_blob,
                        a.after_blob,
                    )
                    for a in s.scalars(
                        select(LaunchArg).where(LaunchArg.launch_id == launch.id).order_by(LaunchArg.position)
                    )
                ]
                cols = [
                    c.name for c in Launch.__table__.columns if c.name not in ("id", "run_id", "kernel_id")
                ]
                return (
                    kernels[launch.kernel_id],
                    json.dumps([getattr(launch, c) for c in cols], default=str),
                    args,
                )

            events = [
                (
                    kernels[e.kernel_id],
                    index.get(e.launch_id),
                    e.tuning_key,
                    e.configs,
                    e.timings,
                    e.chosen,
                    e.created_at,
                )
                for e in s.scalars(
                    select(AutotuneEventRow)
                    .where(AutotuneEventRow.run_id == run.id)
                    .order_by(AutotuneEventRow.id)
                )
            ]
            replays = [
                (index[r.launch_id], r.device, r.backend, r.outcome, r.trace_equal, r.created_at)
                for r in s.scalars(
                    select(Replay).where(Replay.launch_id.in_(list(index))).order_by(Replay.id)
                )
            ]
            out[run.uuid] = {
                "run": (
                    run.argv,
                    run.cwd,
                    run.host,
                    run.pid,
                    run.tag,
                    run.versions,
                    run.status,
                    run.exit_code,
                    run.started_at,
                    run.finished_at,
                ),
                "launches": [launch_row(launch) for launch in launches],
                "events": events,
                "replays": replays,
            }
    return out  # fmt: skip


def _blob_rows(h: History) -> dict[str, tuple[Any, ...]]:
    with h.session() as s:
        return {b.sha256: (b.kind, b.size, b.rows) for b in s.scalars(select(Blob))}


def test_copy_moves_runs_whole_with_new_ids_and_twice_adds_nothing(pair: tuple[History, History]) -> None:
    src, dst = pair
    _record(dst, "already-there", launches=2, seed=9)  # DST's own ids are taken: copied rows must get others
    runs = [_record(src, "a", seed=1), _record(src, "b", launches=4, seed=2)]
    before_dst = content(dst)

    report = copy_history(src, dst)
    assert [s for s, _ in report.runs_copied] == runs
    assert [d for _, d in report.runs_copied] == [2, 3]  # allocated by DST after its own run 1
    assert (report.launches, report.launch_args, report.autotune_events, report.replays) == (7, 28, 2, 2)
    after = content(dst)
    assert after == {**before_dst, **content(src)}  # every row, reference and value, as in SRC
    assert {k: v for k, v in _blob_rows(dst).items() if k in _blob_rows(src)} == _blob_rows(src)
    for sha in _blob_rows(src):
        assert dst.blobs.get_bytes(sha) == src.blobs.get_bytes(sha)  # verified reads of the copied files
    with dst.session() as s:  # every foreign key points inside DST's new rows
        for launch in s.scalars(select(Launch).where(Launch.run_id.in_([2, 3]))):
            assert launch.run.tag in ("a", "b") and launch.kernel.qualname == "add_kernel"

    counts = dst.counts()
    again = copy_history(src, dst)
    assert again.added == 0 and again.blob_files == 0 and again.runs_unchanged == 2
    assert dst.counts() == counts and content(dst) == after


def test_a_run_copied_while_recording_gains_the_rest_on_the_next_copy(pair: tuple[History, History]) -> None:
    src, dst = pair
    run = src.begin_run(store_helpers.run_info(tag="live"))
    first = src.write_launch(run, store_helpers.launch(seq=0, started_at=T0))
    copy_history(src, dst)
    assert dst.counts()["launches"] == 1 and content(dst)[next(iter(content(dst)))]["run"][6] == "running"

    src.write_launch(run, store_helpers.launch(torch.ones(16), seq=1, started_at=T0))
    src.write_replay(first, outcome="mismatch", device="cpu", backend="interpreter", created_at=T0)
    src.finish_run(run, "failed", 1)
    report = copy_history(src, dst)
    assert report.runs_updated == [(run, 1)] and (report.launches, report.replays) == (1, 1)
    assert content(dst) == content(src)
    assert copy_history(src, dst).added == 0


def test_only_the_chosen_runs_and_unknown_ids_refused(pair: tuple[History, History]) -> None:
    src, dst = pair
    _record(src, "a", seed=1)
    second = _record(src, "b", seed=2)
    assert [s for s, _ in copy_history(src, dst, runs=[second]).runs_copied] == [second]
    assert [r[0]["run"][4] for r in [list(content(dst).values())]] == ["b"]
    with pytest.raises(RunNotFoundError, match="no run 99"):
        copy_history(src, dst, runs=[99])


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_bad_blob_stops_its_run_before_any_row(pair: tuple[History, History], damage: str) -> None:
    src, dst = pair
    good = _record(src, "good", seed=1)
    copy_history(src, dst, runs=[good])
    bad = _record(src, "bad", seed=3)
    with src.session() as s:  # x of its last launch: random content of this run only, not yet in DST
        last = s.scalar(select(Launch.id).where(Launch.run_id == bad).order_by(Launch.id.desc()))
        sha = s.scalar(
            select(LaunchArg.before_blob).where(LaunchArg.launch_id == last, LaunchArg.position == 0)
        )
    path = src.blobs.path(sha)
    path.chmod(0o644)
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    counts = dst.counts()
    with pytest.raises(BlobMissingError if damage == "missing" else BlobCorruptError, match=sha):
        copy_history(src, dst)
    assert dst.counts()["launches"] == counts["launches"] and dst.counts()["runs"] == counts["runs"]
    assert not dst.blobs.exists(sha)


def test_cli_copy_is_one_line_and_json(
    tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    src_url = new_history_url("sqlite", tmp_path / "src", request)
    dst_url = new_history_url("postgresql", tmp_path / "dst", request)
    with History.open(src_url, tmp_path / "src" / "blobs") as src:
        run = _record(src, "cli", seed=4)
    where = [
        src_url,
        dst_url,
        "--src-blobs",
        tmp_path / "src" / "blobs",
        "--dst-blobs",
        tmp_path / "dst" / "blobs",
    ]
    assert main(["db", "copy", *map(str, where), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["runs_copied"] == [[run, 1]] and first["launches"] == 3 and first["blob_files"] > 0
    assert "***" not in first["dst"] and first["src"].endswith("src/tilelens.db")
    assert main(["db", "copy", *map(str, where)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("copied 0 runs (none), 0 launches") and "1 unchanged" in out
    code = main(["db", "copy", str(tmp_path / "nothing.db"), dst_url])
    err = capsys.readouterr().err
    assert (
        code == 2
        and err.startswith("tilelens: error: no TileLens history at ")
        and len(err.splitlines()) == 1
    )
    assert not (tmp_path / "nothing.db").exists()  # copying never creates its source


# Two real `tilelens db copy` processes, their imports done, released onto the copy at the same moment.
RACER = """
import os, sys, time
from tilelens.cli import main
import tilelens.store.admin.copy, tilelens.store.write.history  # noqa: F401  # loaded before the start line
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.001)
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_copies_racing_into_one_history_copy_each_run_once(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    import subprocess
    import sys

    src_url = new_history_url("sqlite", tmp_path / "src", request)
    dst_url = new_history_url(backend, tmp_path / "dst", request)
    with History.open(src_url, tmp_path / "src" / "blobs") as src:
        runs = [_record(src, f"race-{i}", launches=12, seed=i) for i in range(4)]
        expected = content(src)
    History.open(dst_url, tmp_path / "dst" / "blobs").close()  # DST exists: the race is the copy's
    go = tmp_path / "go"
    argv = ["db", "copy", src_url, dst_url, "--src-blobs", str(tmp_path / "src" / "blobs")]
    argv += ["--dst-blobs", str(tmp_path / "dst" / "blobs"), "--json"]
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(go), *argv],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    time.sleep(3)  # both past their imports (a slow machine only makes this test pass without racing)
    go.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    assert [(p.returncode, err) for p, (_, err) in zip(procs, outs)] == [(0, ""), (0, "")]
    reports = [json.loads(out) for out, _ in outs]
    # Each run was copied by exactly one of the two; the other found it there ("unchanged").
    copied = sorted(src_id for r in reports for src_id, _ in r["runs_copied"])
    assert copied == runs
    assert sum(r["runs_unchanged"] for r in reports) == len(runs)
    assert sum(r["launches"] for r in reports) == 12 * len(runs)
    with History.open(dst_url, tmp_path / "dst" / "blobs") as dst:
        assert content(dst) == expected  # every row once, the same as SRC's
        for sha in dst.blobs.root.rglob("*"):
            assert not sha.name.endswith(".tmp")
