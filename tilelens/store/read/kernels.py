"""A kernel across versions: every stored version (source hash) of one module.qualname, with its launches.

The history keeps one ``kernels`` row per version of a kernel's source; the web app's kernel page shows them
side by side. Read-only, through the reader of a :class:`~tilelens.store.read.query.HistoryQuery`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilelens.errors import KernelNotFoundError
from tilelens.store.read.results import decode_time
from tilelens.store.sql.readonly import storable_id

if TYPE_CHECKING:
    from tilelens.store.read.query import HistoryQuery


@dataclass
class KernelVersion:
    id: int
    module: str
    qualname: str
    file: str
    def_line: int
    source_sha256: str
    source: str
    launches: int
    oob_launches: int
    error_launches: int
    first_launch: int | None
    last_launch: int | None
    first_at: dt.datetime | None
    last_at: dt.datetime | None

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}"


_VERSIONS = """
SELECT k.id, k.module, k.qualname, k.file, k.def_line, k.source_sha256, k.source,
       COUNT(l.id), SUM(CASE WHEN l.oob_lanes > 0 THEN 1 ELSE 0 END),
       SUM(CASE WHEN l.status = 'error' THEN 1 ELSE 0 END), MIN(l.id), MAX(l.id),
       MIN(l.started_at), MAX(l.started_at)
FROM kernels k LEFT JOIN launches l ON l.kernel_id = k.id
WHERE k.module = :module AND k.qualname = :qualname
GROUP BY k.id, k.module, k.qualname, k.file, k.def_line, k.source_sha256, k.source
ORDER BY k.id
"""


def kernel_versions(query: HistoryQuery, kernel_id: int) -> list[KernelVersion]:
    """Every version of the kernel that row ``kernel_id`` is one version of, oldest first."""
    reader = query.reader
    rows = (
        reader.execute("SELECT module, qualname FROM kernels WHERE id = :id", {"id": kernel_id}).rows
        if storable_id(kernel_id)
        else []
    )
    if not rows:
        raise KernelNotFoundError(f"no kernel {kernel_id} in history {reader.label}")
    module, qualname = rows[0]
    return [
        KernelVersion(
            id=int(r[0]),
            module=r[1],
            qualname=r[2],
            file=r[3],
            def_line=int(r[4]),
            source_sha256=r[5],
            source=r[6],
            launches=int(r[7] or 0),
            oob_launches=int(r[8] or 0),
            error_launches=int(r[9] or 0),
            first_launch=r[10],
            last_launch=r[11],
            first_at=decode_time(r[12]),
            last_at=decode_time(r[13]),
        )
        for r in reader.execute(_VERSIONS, {"module": module, "qualname": qualname}).rows
    ]
