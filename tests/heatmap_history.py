"""A small recorded history whose access patterns are known exactly, for the heatmap and web-app tests.

Launches, in order (ids 1..5 in a fresh history):

1. ``every_third[(3,)](x, y, 24, BLOCK=4)``: x and y are 4 x 6 float32; lanes ``i`` of 0..11 read ``x`` and write
   ``y`` at element ``3 i`` for ``3 i < 24`` (i < 8); lanes 8..11 are masked off (offsets 24, 27, 30, 33).
2. ``unmasked_tail[(2,)](xs, ys, 20, BLOCK=16)``: xs and ys have 20 elements (ys inside a canaried arena);
   lanes 0..31 read xs masked at 20, and store into ys unmasked: 12 out-of-bounds store lanes (20..31).
3. ``histogram[(2,)](hx, bins, 6, BLOCK=4)``: hx = [0, 1, 1, 3, 3, 3]; atomics per bin [1, 2, 0, 3]; the two
   masked-off lanes aim at bin 0.
4. ``every_third[(3,)](x, yt, 24, BLOCK=4)``: as 1, into ``yt``, a 4 x 6 transposed view (strides (1, 4)).
5. ``hostile[(1,)](v, 5, BLOCK=8)``: a kernel whose qualname is HTML (``heatmap_kernels.HOSTILE_NAME``), in a run
   tagged ``<b>tag</b>``.
6. ``every_third_v2[(3,)](x, y, 24, BLOCK=4)`` in that run: a second version of ``every_third`` (same name,
   another source).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HOSTILE_TAG = "<b>tag</b>"


@dataclass(frozen=True)
class HeatmapHistory:
    db: Path | str  # the SQLite file, or a PostgreSQL URL (a copy: see on_postgres)
    blobs: Path
    ids: list[int]  # launch ids, in the order above
    runs: list[int]  # the two runs' ids


def on_postgres(hist: HeatmapHistory, url: str, blobs: Path) -> HeatmapHistory:
    """A copy of ``hist`` in the empty PostgreSQL database ``url`` (ids as the copy numbered them)."""
    from tilelens.config import resolve_location
    from tilelens.store import History
    from tilelens.store.admin.copy import copy_history
    from tilelens.store.sql.readonly import open_reader

    with History.open(str(hist.db), hist.blobs) as src, History.open(url, blobs) as dst:
        copy_history(src, dst)
    with open_reader(resolve_location(url, blobs, env={})) as reader:
        ids = [int(r[0]) for r in reader.execute("SELECT id FROM launches ORDER BY id").rows]
        runs = [int(r[0]) for r in reader.execute("SELECT id FROM runs ORDER BY id").rows]
    return HeatmapHistory(url, blobs, ids, runs)


def record_history(folder: Path) -> HeatmapHistory:
    import torch

    import tilelens
    from tests import heatmap_kernels as hk
    from tests.oob_programs import Arena

    db, blobs = folder / "h.db", folder / "blobs"
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    y = torch.zeros(4, 6)
    xs = torch.arange(20, dtype=torch.float32)
    ys = Arena(20, 64)
    hx = torch.tensor([0, 1, 1, 3, 3, 3], dtype=torch.int32)
    bins = torch.zeros(4, dtype=torch.int32)
    yt = torch.zeros(6, 4).t()
    v = torch.zeros(5, dtype=torch.int32)
    with tilelens.record(str(db), blobs) as rec:
        hk.every_third[(3,)](x, y, 24, BLOCK=4)
        hk.unmasked_tail[(2,)](xs, ys.tensor, 20, BLOCK=16)
        hk.histogram[(2,)](hx, bins, 6, BLOCK=4)
        hk.every_third[(3,)](x, yt, 24, BLOCK=4)
    with tilelens.record(str(db), blobs, tag=HOSTILE_TAG) as rec2:
        hk.hostile[(1,)](v, 5, BLOCK=8)
        hk.every_third_v2[(3,)](x, y, 24, BLOCK=4)
    assert ys.canaries_intact() and bins.tolist() == [1, 2, 0, 3] and v.tolist() == [1] * 5
    return HeatmapHistory(db, blobs, [*rec.launch_ids, *rec2.launch_ids], [rec.run_id, rec2.run_id])
