"""Make recorded values safe for JSON columns without losing what replay needs.

Configs and scalar arguments come from user code: numpy scalars, tuples, ``float('nan')``, dtypes. Strict JSON
(PostgreSQL's) rejects NaN and infinities, and a value that fails to serialise would lose the whole launch.
So non-finite floats get a tagged form that :func:`from_json` turns back into the float, and anything that is
not plain data is kept as its type and ``repr`` (readable, never executed).
"""

from __future__ import annotations

import math
from typing import Any

FLOAT_TAG = "$float"
REPR_TAG = "$repr"
TYPE_TAG = "$type"


def to_json(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else {FLOAT_TAG: repr(float(value))}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        try:
            return to_json(item())
        except (TypeError, ValueError):
            pass
    cls = type(value)
    return {TYPE_TAG: f"{cls.__module__}.{cls.__qualname__}", REPR_TAG: repr(value)}


def from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [from_json(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {FLOAT_TAG}:
            return float(value[FLOAT_TAG])
        return {k: from_json(v) for k, v in value.items()}
    return value
