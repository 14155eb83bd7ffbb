"""Two versions of one kernel side by side: what ``tilelens diff --kernel NAME --source-sha A B`` reports.

A kernel version is one row of ``kernels`` (module, qualname and source hash); a hash is given by any unique
prefix. For each version the figures are summed over its launches (role ``launch``; autotune trials apart):
bytes moved per program, active lanes per program, out-of-bounds lanes, and the autotuner's choices per
tuning key. ``same`` holds when the two prefixes name one version, or the versions' figures all agree and
their sources are equal (which, the hash being of the source, means one version).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from tilelens.errors import UsageError
from tilelens.store.read.filters import in_list
from tilelens.store.read.results import decode_json

if TYPE_CHECKING:
    from tilelens.store.read.query import HistoryQuery


@dataclass
class VersionStats:
    kernel: str  # module.qualname
    source_sha256: str
    launches: int
    programs: int  # sum of grid sizes
    bytes_per_program: float | None  # (bytes loaded + stored) / programs; None without programs
    lanes_per_program: float | None  # active lanes / programs
    active_lanes: int
    oob_lanes: int
    oob_launches: int
    autotune: dict[str, dict[str, int]]  # tuning key -> chosen config (JSON text) -> decisions


@dataclass
class VersionDiff:
    a: VersionStats
    b: VersionStats
    source_diff: list[str]
    differs: list[str]  # names of the figures that differ

    @property
    def same(self) -> bool:
        return not self.differs and not self.source_diff

    def as_dict(self) -> dict[str, Any]:
        return {"same": self.same, **asdict(self)}


COMPARED = (
    "source_sha256",
    "bytes_per_program",
    "lanes_per_program",
    "oob_lanes",
    "oob_launches",
    "autotune",
)


def diff_versions(q: HistoryQuery, kernel: str, sha_a: str, sha_b: str) -> VersionDiff:
    """Compare two versions of ``kernel`` (a name as ``--kernel`` takes it) given by source-hash prefixes."""
    ids = q.kernel_ids(kernel)
    if not ids:
        raise UsageError(f"no kernel named {kernel!r} in history {q.reader.label}")
    marks, params = in_list(ids, "k")
    rows = q.reader.execute(
        f"SELECT id, module, qualname, source_sha256, source FROM kernels WHERE id IN ({marks})", params
    ).rows
    (id_a, source_a), (id_b, source_b) = (_version(rows, kernel, prefix) for prefix in (sha_a, sha_b))
    stats_a, stats_b = _stats(q, id_a), _stats(q, id_b)
    source_diff: list[str] = []
    if source_a != source_b:
        source_diff = [
            line.rstrip("\n")
            for line in difflib.unified_diff(
                source_a.splitlines(keepends=True),
                source_b.splitlines(keepends=True),
                fromfile=f"{stats_a.kernel} ({stats_a.source_sha256[:12]})",
                tofile=f"{stats_b.kernel} ({stats_b.source_sha256[:12]})",
            )
        ]
    differs = [name for name in COMPARED if getattr(stats_a, name) != getattr(stats_b, name)]
    return VersionDiff(stats_a, stats_b, source_diff, differs)


def _version(rows: list[tuple[Any, ...]], kernel: str, prefix: str) -> tuple[int, str]:
    """The one kernel row whose hash starts with ``prefix`` (case ignored); else one clear error."""
    wanted = prefix.strip().lower()
    if not wanted or any(c not in "0123456789abcdef" for c in wanted):
        raise UsageError(f"source sha {prefix!r} is not a hexadecimal prefix")
    found = [r for r in rows if str(r[3]).startswith(wanted)]
    if not found:
        raise UsageError(f"no version of kernel {kernel!r} has a source sha starting with {prefix!r}")
    if len(found) > 1:
        names = ", ".join(f"{r[1]}.{r[2]} {str(r[3])[:12]}" for r in found)
        raise UsageError(f"source sha {prefix!r} is ambiguous for kernel {kernel!r}: {names}")
    r = found[0]
    return int(r[0]), str(r[4])


def _stats(q: HistoryQuery, kernel_id: int) -> VersionStats:
    ((module, qualname, sha),) = q.reader.execute(
        "SELECT module, qualname, source_sha256 FROM kernels WHERE id = :id", {"id": kernel_id}
    ).rows
    ((launches, programs, moved, active, oob, oob_launches),) = q.reader.execute(
        "SELECT count(*), sum(grid_x * grid_y * grid_z), sum(bytes_loaded + bytes_stored), "
        "sum(load_lanes + store_lanes + atomic_lanes), sum(oob_lanes), "
        "sum(CASE WHEN oob_lanes > 0 THEN 1 ELSE 0 END) "
        "FROM launches WHERE kernel_id = :id AND role = 'launch'",
        {"id": kernel_id},
    ).rows
    programs = int(programs or 0)
    autotune: dict[str, dict[str, int]] = {}
    for key, chosen in q.reader.execute(
        "SELECT tuning_key, CAST(chosen AS TEXT) FROM autotune_events WHERE kernel_id = :id ORDER BY id",
        {"id": kernel_id},
    ).rows:
        text = json.dumps(decode_json(chosen), sort_keys=True)
        per_key = autotune.setdefault(str(key), {})
        per_key[text] = per_key.get(text, 0) + 1
    return VersionStats(
        kernel=f"{module}.{qualname}",
        source_sha256=str(sha),
        launches=int(launches or 0),
        programs=programs,
        bytes_per_program=int(moved or 0) / programs if programs else None,
        lanes_per_program=int(active or 0) / programs if programs else None,
        active_lanes=int(active or 0),
        oob_lanes=int(oob or 0),
        oob_launches=int(oob_launches or 0),
        autotune=autotune,
    )
