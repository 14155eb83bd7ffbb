"""The one kernel-name matcher: what ``--kernel NAME`` means for every command (``ls``, ``replay``, ...).

A name matches a kernel when it equals the kernel's ``qualname`` or its ``module.qualname``, where ``*`` stands
for any run of characters (dots included) and ``?`` for one character; nothing else is special, and case
counts, as it does in Python. Matching happens here, in Python, over the (few) rows of the ``kernels`` table,
not in SQL: ``LIKE`` ignores case on SQLite and not on PostgreSQL, so SQL would answer differently per backend.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

#: The rows :func:`matching_ids` takes: (id, module, qualname) of every kernel version.
KERNEL_NAMES_SQL = "SELECT id, module, qualname FROM kernels"


@lru_cache(maxsize=64)
def _pattern(name: str) -> re.Pattern[str]:
    wildcards = {"*": ".*", "?": "."}
    return re.compile("".join(wildcards.get(c) or re.escape(c) for c in name), re.DOTALL)


def matches(name: str, module: str, qualname: str) -> bool:
    """Whether ``name`` (``*``/``?`` wildcards) names the kernel ``module.qualname``."""
    pattern = _pattern(name)
    return pattern.fullmatch(qualname) is not None or pattern.fullmatch(f"{module}.{qualname}") is not None


def matching_ids(name: str, kernels: Iterable[tuple[int, str, str]]) -> list[int]:
    """Ids of the kernels (rows of :data:`KERNEL_NAMES_SQL`) that ``name`` matches, in the rows' order."""
    return [int(kernel_id) for kernel_id, module, qualname in kernels if matches(name, module, qualname)]
