"""What ``tilelens check`` reports: findings per launch, as plain data (``as_dict()`` is the ``--json``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

WRITE_WRITE, READ_WRITE, MIXED_ATOMIC, OUT_OF_BOUNDS = (
    "write-write",
    "read-write",
    "mixed-atomic",
    "out-of-bounds",
)
FINDING_KINDS = (WRITE_WRITE, READ_WRITE, MIXED_ATOMIC, OUT_OF_BOUNDS)
SAMPLE = 3  # elements and programs named in full; the rest are counted


@dataclass
class Elements:
    """Elements of one argument: how many, the first few and the last, as logical indices.

    An element the view's shape cannot name (outside it, or in a gap of a strided view) is given as its
    element offset from the view's start instead, in ``first_offsets``/``last_offset``.
    """

    count: int
    first: list[list[int] | None]
    last: list[int] | None
    first_offsets: list[int]
    last_offset: int


@dataclass
class Side:
    """One side of a finding: the accesses of one source line."""

    ops: list[str]  # load, store, atomic_add...
    line: int
    source: str | None  # the line's text, None outside the kernel's own source
    programs: int
    first_programs: list[list[int]]  # program ids (x, y, z), lowest first


@dataclass
class Finding:
    """One kind of trouble on one argument between the accesses of one or two source lines.

    ``sides``: two for a conflict (the first side is the read, the plain access, or the lower line of two
    writes), one for out-of-bounds lanes. ``lanes``, ``events`` and ``dropped`` only for out-of-bounds lanes:
    the lanes outside the view, the events they were in, and those outside every argument's memory (never
    written nor read).
    """

    kind: str
    arg: int
    arg_name: str | None
    elements: Elements
    sides: list[Side]
    numel: int | None = None
    lanes: int | None = None
    events: int | None = None
    dropped: int | None = None


@dataclass
class Synchronized:
    """Conflicting accesses that every pair of programs made holding one same lock: reported, not a finding."""

    kind: str
    arg: int
    arg_name: str | None
    elements: Elements
    sides: list[Side]
    locks: list[str]  # the lock elements, as "name[index]"
    lock_count: int
    take_lines: list[int]


@dataclass
class LaunchCheck:
    """The check of one launch; ``checked`` is False (with ``reason``) for a launch without an access trace."""

    launch_id: int
    kernel: str
    grid: tuple[int, int, int]
    checked: bool
    reason: str | None = None
    findings: list[Finding] = field(default_factory=list)
    synchronized: list[Synchronized] = field(default_factory=list)

    def failing(self, kinds: tuple[str, ...] = FINDING_KINDS) -> list[Finding]:
        """The findings of ``kinds``: those that make ``tilelens check --fail-on`` exit 1."""
        return [f for f in self.findings if f.kind in kinds]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["grid"] = list(self.grid)
        return out


def parse_finding_kinds(text: str) -> tuple[str, ...]:
    """``--fail-on``'s comma-separated kinds (``all``: every kind); ValueError naming a kind not known."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if names == ["all"]:
        return FINDING_KINDS
    unknown = [n for n in names if n not in FINDING_KINDS]
    if unknown or not names:
        raise ValueError(f"unknown finding kind {unknown[0]!r}" if unknown else "no finding kind given")
    return tuple(k for k in FINDING_KINDS if k in names)
