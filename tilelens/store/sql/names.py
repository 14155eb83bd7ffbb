"""The one kernel-name matcher: what ``--kernel NAME`` means for every command (``ls``, ``replay``, ...).

A name matches a kernel when it equals the kernel's ``qualname`` or its ``module.qualname``, where ``*`` stands
for any run of characters (dots included) and ``?`` for one character; nothing else is special, and case
counts, as it does in Python. Matching happens here, in Python, over the (few) rows of the ``kernels`` table,
not in SQL: ``LIKE`` ignores case on SQLite and not on PostgreSQL, so SQL would answer differently per backend.

The matcher never backtracks further than the last ``*`` (a run of ``*`` is one ``*``): its time is at most
the pattern's length times the name's, never exponential, whatever the pattern (a regular expression built
from ``*`` as ``.*`` took 38 s for ``***************x``). Patterns longer than :data:`MAX_PATTERN` characters
are refused with one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tilelens.errors import UsageError

#: The rows :func:`matching_ids` takes: (id, module, qualname) of every kernel version.
KERNEL_NAMES_SQL = "SELECT id, module, qualname FROM kernels"
#: The longest kernel-name pattern accepted (a module path and a qualname fit many times over).
MAX_PATTERN = 512
_STARS = re.compile(r"\*{2,}")


def check_pattern(name: str) -> str:
    """``name`` with each run of ``*`` made one ``*``; :class:`UsageError` when it is too long to be a name."""
    if len(name) > MAX_PATTERN:
        raise UsageError(
            f"kernel name pattern is {len(name):,} characters long; at most {MAX_PATTERN} are accepted"
        )
    return _STARS.sub("*", name)


def glob_match(pattern: str, text: str) -> bool:
    """Whether ``text`` is all of ``pattern`` (``*``: any run of characters, ``?``: one), without backtracking
    past the last ``*``: after a mismatch only the characters the last ``*`` absorbs are retried."""
    p = t = 0
    star = -1  # where the last '*' was in the pattern
    mark = 0  # where its run in the text starts
    while t < len(text):
        if p < len(pattern) and pattern[p] == "*":
            star, mark = p, t
            p += 1
        elif p < len(pattern) and (pattern[p] == "?" or pattern[p] == text[t]):
            p += 1
            t += 1
        elif star >= 0:
            mark += 1
            p, t = star + 1, mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def matches(name: str, module: str, qualname: str) -> bool:
    """Whether ``name`` (``*``/``?`` wildcards) names the kernel ``module.qualname``."""
    pattern = check_pattern(name)
    return glob_match(pattern, qualname) or glob_match(pattern, f"{module}.{qualname}")


def matching_ids(name: str, kernels: Iterable[tuple[int, str, str]]) -> list[int]:
    """Ids of the kernels (rows of :data:`KERNEL_NAMES_SQL`) that ``name`` matches, in the rows' order."""
    pattern = check_pattern(name)
    return [
        int(kernel_id)
        for kernel_id, module, qualname in kernels
        if glob_match(pattern, qualname) or glob_match(pattern, f"{module}.{qualname}")
    ]
