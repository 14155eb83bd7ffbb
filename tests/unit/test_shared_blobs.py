"""One blob folder shared by writers that know nothing of each other (machines of a team, here processes).

Each writer has its own History (own engine, own BlobStore) on one database and one blob folder. Identical
content written by both at once must end up as one verified file, every row's blob must read back verified,
and no temp file may stay behind: the atomic write (temp file in the blob's folder, fsync, rename, fsync of
the folder) is what makes this safe without any lock between the writers.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from sqlalchemy import select

from tilelens.store import History
from tilelens.store.sql.models import Blob, Launch, LaunchArg

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import sys, torch
    from tests import store_helpers
    from tilelens.store import History

    db, blobs, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    shared = torch.arange(4096, dtype=torch.float32)      # the same bytes in both writers, every launch
    own = torch.Generator().manual_seed(seed)
    with History.open(db, blobs) as h:
        run = h.begin_run(store_helpers.run_info(tag=f"writer-{seed}"))
        for i in range(count):
            mine = torch.randn(4096, generator=own)        # content only this writer has
            rec = store_helpers.launch(shared.clone(), torch.zeros(4096), mine, seq=i,
                                       trace=store_helpers.trace_table(8))
            h.write_launch(run, rec)
        h.finish_run(run, "ok", 0)
    """
)


def test_two_writers_share_one_blob_folder(history_url: str, tmp_path: Path) -> None:
    blobs = tmp_path / "team-blobs"
    History.open(history_url, blobs).close()  # created once, as a team's database is
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, history_url, str(blobs), str(seed), "10"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err

    with History.open(history_url, blobs) as h, h.session() as s:
        assert h.counts()["launches"] == 20
        referenced = set(s.scalars(select(Launch.trace_blob)))
        referenced |= set(s.scalars(select(LaunchArg.before_blob))) | set(
            s.scalars(select(LaunchArg.after_blob))
        )
        referenced.discard(None)
        rows = {b.sha256: b.size for b in s.scalars(select(Blob))}
        for sha in referenced:  # every row's blob is there, whole, under its own name
            assert len(h.blobs.get_bytes(sha)) == rows[sha]
    files = [p for p in blobs.rglob("*") if p.is_file()]
    assert sorted(p.name for p in files) == sorted(rows)  # one file per content, none half-written
    assert not [p for p in files if p.name.startswith(".")]  # no temp file left
    # shared input, zeros, shared trace; then 10 own outputs per writer
    assert len(rows) == 3 + 20


RACE = textwrap.dedent(
    """
    import sys
    from tilelens.store.files.blobs import BlobStore
    store = BlobStore(sys.argv[1])
    for i in range(200):
        store.put_bytes(bytes([i % 251]) * (1000 + i), "raw")
    """
)


def test_racing_writes_of_the_same_content_leave_one_verified_file(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", RACE, str(tmp_path / "b")], cwd=ROOT, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    from tilelens.store.files.blobs import BlobStore

    store = BlobStore(tmp_path / "b")
    files = [p for p in (tmp_path / "b").rglob("*") if p.is_file()]
    assert len(files) == 200 and not [p for p in files if p.name.startswith(".")]
    for i in range(200):
        data = bytes([i % 251]) * (1000 + i)
        assert store.get_bytes(store.put_bytes(data, "raw")) == data
