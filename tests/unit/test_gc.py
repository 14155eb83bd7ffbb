"""``History.gc`` / ``tilelens gc``: leftovers and selected runs go, nothing a row (or a live writer) needs does."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
import torch
from sqlalchemy import select

from tests import store_helpers, store_writer
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tests.unit.test_history import REPO, _check_every_reference, _kill_at_random_moments
from tilelens.config import Location
from tilelens.records import utcnow
from tilelens.store import History
from tilelens.store.admin import gc as gc_module
from tilelens.store.admin.gc import collect_garbage
from tilelens.store.sql.models import AutotuneEventRow, Blob, Launch, LaunchArg, Replay, Run

DAY = 86400.0


def _writer(db: str, count: int, seed: int, distinct: int) -> subprocess.Popen[str]:
    """tests/store_writer.py: launch i stores the same tensors as launch i % distinct of any such writer."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store_writer", db, str(count), str(seed), str(distinct)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when))


def _files(h: History) -> dict[str, int]:
    """Every file under the blob folder (relative name -> size)."""
    return {
        str(p.relative_to(h.blobs.root)): p.stat().st_size for p in h.blobs.root.rglob("*") if p.is_file()
    }


def _dump(h: History) -> list[str]:
    """Every row of every table, in a stable order (either backend)."""
    return store_helpers.dump_rows(h.engine)


def _run(h: History, *, days: float = 0.0, tag: str | None = None, x: torch.Tensor | None = None) -> int:
    """A finished run started ``days`` ago, with one launch (input ``x``, a fresh output), a replay and an
    autotune event."""
    info = store_helpers.run_info(tag=tag)
    info.started_at = utcnow() - dt.timedelta(days=days)
    run = h.begin_run(info)
    x = torch.randn(16) if x is None else x
    launch = h.write_launch(
        run, store_helpers.launch(x, torch.zeros(16), torch.randn(16), trace=store_helpers.trace_table(4))
    )
    h.write_autotune_event(run, store_helpers.autotune_event(), launch)
    h.write_replay(launch, outcome="match", device="cpu", backend="interpreter")
    h.finish_run(run, "ok", 0)
    return run


def _blobs_of(h: History, run: int) -> set[str]:
    with h.session() as s:
        launches = select(Launch.id).where(Launch.run_id == run)
        shas = set(s.scalars(select(Launch.trace_blob).where(Launch.run_id == run)))
        shas |= set(s.scalars(select(LaunchArg.before_blob).where(LaunchArg.launch_id.in_(launches))))
        shas |= set(s.scalars(select(LaunchArg.after_blob).where(LaunchArg.launch_id.in_(launches))))
    shas.discard(None)
    return shas  # type: ignore[return-value]


def test_leftovers_go_once_older_than_the_grace_period(history: History) -> None:
    stray_sha = history.blobs.put_bytes(b"no row names me", "tensor")
    run = _run(history)
    referenced = _blobs_of(history, run)
    old_unref = history.blobs.store_bytes(b"old, from a killed writer", "tensor")
    young_unref = history.blobs.store_bytes(b"young: a writer may commit it any moment", "tensor")
    shard = history.blobs.path(old_unref.sha256).parent
    old_tmp, young_tmp, foreign = shard / ".abc.tmp", shard / ".def.tmp", shard / "notes.txt"
    for path, text in ((old_tmp, b"12345"), (young_tmp, b"1"), (foreign, b"not ours")):
        path.write_bytes(text)
    for path in (old_tmp, foreign, history.blobs.path(old_unref.sha256), history.blobs.path(stray_sha)):
        _age(path, 2 * 3600)
    for sha in referenced:
        _age(history.blobs.path(sha), 2 * 3600)

    report = collect_garbage(history)
    assert report.as_dict() == {
        "dry_run": False,
        "runs": 0,
        "launches": 0,
        "launch_args": 0,
        "autotune_events": 0,
        "replays": 0,
        "blob_rows": 0,
        "blob_files": 2,  # the killed writer's, and the one put_bytes stored without any row
        "blob_bytes": old_unref.size + len(b"no row names me"),
        "tmp_files": 1,
        "tmp_bytes": 5,
        "young_files": 2,
        "run_ids": [],
        "files": 3,
        "bytes_freed": old_unref.size + len(b"no row names me") + 5,
    }
    assert not old_tmp.exists() and not history.blobs.exists(old_unref.sha256)
    assert young_tmp.exists() and foreign.exists() and history.blobs.exists(young_unref.sha256)
    for sha in referenced:
        history.blobs.verify(sha)
    assert collect_garbage(history, grace=dt.timedelta(0)).files == 2  # nobody writing: the young ones too
    assert collect_garbage(history).as_dict()["files"] == 0


@pytest.mark.parametrize(
    "options, removed",
    [
        ({"older_than": dt.timedelta(days=30)}, {"old_tagged", "old_untagged", "old_empty_tag"}),
        ({"untagged": True}, {"old_untagged", "new_untagged", "old_empty_tag"}),
        ({"untagged": True, "older_than": dt.timedelta(days=30)}, {"old_untagged", "old_empty_tag"}),
        ({}, set()),
    ],
)
def test_runs_selected_by_age_and_tag_go_with_everything_only_they_used(
    history: History, options: dict[str, object], removed: set[str]
) -> None:
    shared = torch.arange(16.0)  # an input every run reads: its blob must outlive any one run
    runs = {
        "old_tagged": _run(history, days=40, tag="keep", x=shared),
        "old_untagged": _run(history, days=40, x=shared),
        "old_empty_tag": _run(history, days=31, tag=""),
        "new_untagged": _run(history, days=1, x=shared),
        "new_tagged": _run(history, days=1, tag="nightly"),
    }
    info = store_helpers.run_info()
    info.started_at = utcnow() - dt.timedelta(days=90)
    runs["old_running"] = history.begin_run(info)  # still recording (on another host): never removed
    history.write_launch(runs["old_running"], store_helpers.launch(shared))
    blobs = {name: _blobs_of(history, run) for name, run in runs.items()}
    kept_blobs = set().union(*(b for n, b in blobs.items() if n not in removed))
    gone_blobs = set().union(*(blobs[n] for n in removed)) - kept_blobs
    for path in history.blobs.root.rglob("*"):
        if path.is_file():
            _age(path, 40 * DAY)
    sizes = {sha: history.blobs.path(sha).stat().st_size for sha in gone_blobs}

    report = collect_garbage(history, **options)  # type: ignore[arg-type]
    assert sorted(report.run_ids) == sorted(runs[n] for n in removed)
    n = len(removed)
    assert (report.runs, report.launches, report.launch_args) == (n, n, 4 * n)
    assert (report.autotune_events, report.replays) == (n, n)
    assert report.blob_rows == report.blob_files == len(gone_blobs)
    assert report.blob_bytes == report.bytes_freed == sum(sizes.values())
    with history.session() as s:
        assert set(s.scalars(select(Run.id))) == {runs[n] for n in runs if n not in removed}
        assert s.scalar(select(sa.func.count()).select_from(Replay)) == 5 - n
        assert s.scalar(select(sa.func.count()).select_from(AutotuneEventRow)) == 5 - n
        assert set(s.scalars(select(Blob.sha256))) == kept_blobs
    for sha in gone_blobs:
        assert not history.blobs.exists(sha)
    assert all(history.blobs.exists(sha) for sha in kept_blobs)
    _check_every_reference(history)


def test_dry_run_reports_the_same_and_changes_nothing(history: History) -> None:
    for days in (40, 35, 2):
        _run(history, days=days)
    history.blobs.put_bytes(b"stray", "trace")
    for path in history.blobs.root.rglob("*"):
        if path.is_file():
            _age(path, 40 * DAY)
    (history.blobs.root / "00").mkdir(exist_ok=True)
    (history.blobs.root / "00" / ".x.tmp").write_bytes(b"tmp")
    _age(history.blobs.root / "00" / ".x.tmp", 2 * DAY)
    rows, files = _dump(history), _files(history)

    dry = collect_garbage(history, older_than=dt.timedelta(days=30), dry_run=True)
    assert (_dump(history), _files(history)) == (rows, files)
    real = collect_garbage(history, older_than=dt.timedelta(days=30))
    assert {**dry.as_dict(), "dry_run": False} == real.as_dict()
    assert (real.runs, real.tmp_files) == (2, 1) and real.blob_files > 0
    assert sum(files.values()) - sum(_files(history).values()) == real.bytes_freed


def test_a_reused_blob_is_refreshed_so_gc_keeps_it(history: History) -> None:
    data = b"content some run stored long ago"
    ref = history.blobs.store_bytes(data, "tensor")
    path = history.blobs.path(ref.sha256)
    _age(path, 40 * DAY)
    history.blobs.store_bytes(data, "tensor")  # a writer reusing it, about to commit a row naming it
    assert path.stat().st_mtime > time.time() - 3600
    assert collect_garbage(history).blob_files == 0 and path.exists()

    x = torch.randn(64)
    sha = history.blobs.store_tensor(x).sha256
    _age(history.blobs.path(sha), 40 * DAY)
    assert history.blobs.store_tensor(x).sha256 == sha  # recognised without hashing: refreshed all the same
    assert history.blobs.path(sha).stat().st_mtime > time.time() - 3600
    history.blobs.path(sha).unlink()  # collected meanwhile: the writer writes it again
    assert history.blobs.store_tensor(x).sha256 == sha
    assert torch.equal(history.blobs.get_tensor(sha), x)


def test_a_refresh_between_look_and_rename_keeps_the_file(
    history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The narrowest window: a writer refreshes the file after gc judged it old but before gc moved it."""
    sha = history.blobs.put_bytes(b"reused right now", "tensor")
    path = history.blobs.path(sha)
    _age(path, 40 * DAY)
    rename = os.rename

    def writer_first(src: object, dst: object) -> None:
        os.utime(src)  # type: ignore[arg-type]
        rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(gc_module.os, "rename", writer_first)
    report = collect_garbage(history)
    assert (report.blob_files, report.young_files) == (0, 1)
    assert history.blobs.get_bytes(sha) == b"reused right now"
    assert sorted(p.name for p in path.parent.iterdir()) == [sha]  # nothing left aside


def test_a_launch_committed_after_the_plan_keeps_its_blobs(
    history: History, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer reuses the doomed run's tensors and commits right after gc deleted that run (its launch even
    takes the deleted launch's id, which SQLite reuses): the blob rows and files it names must stay."""
    x = torch.randn(16)
    doomed = _run(history, days=40, x=x)
    with history.session() as s:
        (doomed_launch,) = s.scalars(select(Launch.id).where(Launch.run_id == doomed))
    for path in history.blobs.root.rglob("*"):
        if path.is_file():
            _age(path, 40 * DAY)
    delete_runs = gc_module._delete_runs
    late: list[int] = []
    late_run: list[int] = []

    def then_a_writer_commits(*args: object) -> None:
        delete_runs(*args)  # type: ignore[arg-type]
        late_run.append(history.begin_run(store_helpers.run_info()))
        late.append(
            history.write_launch(late_run[0], store_helpers.launch(x, trace=store_helpers.trace_table(4)))
        )

    monkeypatch.setattr(gc_module, "_delete_runs", then_a_writer_commits)
    report = collect_garbage(history, older_than=dt.timedelta(days=30))
    assert report.run_ids == [doomed]
    if history.engine.dialect.name == "sqlite":  # SQLite reused both ids: the deleted run's and launch's
        assert (late_run, late) == ([doomed], [doomed_launch])
    else:  # PostgreSQL's sequences never give an id twice
        assert late_run[0] > doomed and late[0] > doomed_launch
    assert (
        len(_blobs_of(history, late_run[0])) == 3
    )  # x, the unchanged zeros, the trace: reused from the old run
    assert report.blob_rows == report.blob_files == 1  # only the old run's own output
    _check_every_reference(history)


def test_killed_writers_leftovers_are_collected(history_url: str) -> None:
    db = history_url
    _kill_at_random_moments(db, 2, random.Random(os.getpid()), first_seed=50)
    with History.open(db) as h:
        launches = _check_every_reference(h)
        before = _files(h)
        report = collect_garbage(h, grace=dt.timedelta(0))  # nobody is writing any more
        after = _files(h)
        assert len(before) - len(after) == report.files
        assert sum(before.values()) - sum(after.values()) == report.bytes_freed
        assert not [name for name in after if name.endswith(".tmp")]
        with h.session() as s:
            assert {name.split("/")[1] for name in after} == set(s.scalars(select(Blob.sha256)))
        assert _check_every_reference(h) == launches


def test_gc_while_a_writer_records_keeps_every_blob_it_references(history_url: str) -> None:
    """A writer reusing the blobs of an old run while gc removes that run, again and again."""
    db, distinct = history_url, 8
    with History.open(db) as h:
        info = store_helpers.run_info(tag="old")
        info.started_at = utcnow() - dt.timedelta(days=40)
        old = h.begin_run(info)
        for i in range(distinct):  # every content the writer below stores
            h.write_launch(old, store_writer.make_launch(i, torch.Generator(), distinct))
        h.finish_run(old, "ok", 0)
        for path in h.blobs.root.rglob("*"):
            if path.is_file():
                _age(path, 40 * DAY)
        writer = _writer(db, 3 * distinct, 1, distinct)
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        removed: list[int] = []
        while True:  # at least once, however fast the writer is
            removed += collect_garbage(h, older_than=dt.timedelta(days=30)).run_ids
            if writer.poll() is not None:
                break
        _, err = writer.communicate()
        assert writer.returncode == 0, err
        assert removed == [old]
        assert _check_every_reference(h) == 3 * distinct
        with h.session() as s:
            assert [(r.tag, r.status) for r in s.scalars(select(Run))] == [("writer-1", "ok")]


def test_cli(history_url: str) -> None:
    db = history_url
    with History.open(db) as h:
        _run(h, days=40)
        _run(h, days=1, tag="t")
    location = ["--db", db]  # blobs: TILELENS_BLOBS, as for History.open above
    out = tilelens_in_process(*location, "gc", "--older-than", "30d", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("would remove 1 run, 1 launch, ")
    assert "kept " in out.stderr and "younger than --grace 1h" in out.stderr
    report = json.loads(
        tilelens_in_process(*location, "gc", "--older-than", "30d", "--grace", "0", "--json").stdout
    )
    assert (report["runs"], report["launches"], report["dry_run"]) == (1, 1, False)
    assert report["blob_files"] == report["blob_rows"] > 0
    assert "not an age or a date: 'soon'" in one_line_error(
        tilelens_in_process(*location, "gc", "--older-than", "soon")
    )
    assert "not a duration" in one_line_error(tilelens_in_process(*location, "gc", "--grace", "-1h"))


def test_cutoffs() -> None:
    now = dt.datetime(2026, 3, 1, 12, tzinfo=dt.timezone.utc)
    assert gc_module.gc_cutoff("30d", now) == now - dt.timedelta(days=30)
    assert gc_module.gc_cutoff("2w", now) == now - dt.timedelta(days=14)
    assert gc_module.gc_cutoff("1.5h", now) == now - dt.timedelta(minutes=90)
    assert gc_module.gc_cutoff("2026-01-31T00:00:00+00:00", now) == dt.datetime(
        2026, 1, 31, tzinfo=dt.timezone.utc
    )
    local = dt.datetime(2026, 1, 31).astimezone()
    assert gc_module.gc_cutoff("2026-01-31", now) == local
    assert gc_module.gc_duration("0") == dt.timedelta(0)
    assert gc_module.gc_duration("10m") == dt.timedelta(minutes=10)
    for bad in ("", "30", "30y", "yesterday", "-3d"):
        with pytest.raises(gc_module.GcInputError):
            gc_module.gc_cutoff(bad, now)


def test_in_memory_location_is_refused_by_history_open() -> None:
    from tilelens.config import LocationError

    with pytest.raises(LocationError, match="in-memory"):
        History.open(location=Location("sqlite://", Path("/nonexistent")))
