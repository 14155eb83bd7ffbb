"""The partition folder names of ``tilelens export --dataset``: every kernel name comes back exactly."""

from __future__ import annotations

import hashlib
import string

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from tilelens.store.files.dataset import NAME_MAX, escape_segment, kernel_value, partition_path

NAMES = [
    "".join(chr(c) for c in range(1, 64)),  # every ASCII character but NUL, in two names that fit
    "".join(chr(c) for c in range(64, 128)),
    "mod.f.<locals>.kernel",
    "a/b=c%41%zz%",
    "ünïcödé.模块.kern",
    "..",
    "__HIVE_DEFAULT_PARTITION__.k",
]


@pytest.mark.parametrize("name", NAMES)
def test_pyarrow_reads_back_the_exact_name(name: str) -> None:
    path = partition_path(name, "2026-01-02")
    kernel, day = path.split("/")
    assert (kernel.split("=", 1)[0], day) == ("kernel", "day=2026-01-02")
    escaped = kernel.split("=", 1)[1]
    assert set(escaped) <= set(string.ascii_letters + string.digits + "-_.~%") | {
        c for c in name if ord(c) > 127
    }
    hive = ds.partitioning(pa.schema([("kernel", pa.string()), ("day", pa.string())]), flavor="hive")
    keys = ds.get_partition_keys(hive.parse(f"/{path}/part-0.parquet"))
    assert keys == {"kernel": name, "day": "2026-01-02"}


def test_escaping_is_percent_hex_of_ascii_only() -> None:
    assert escape_segment("a b/c=d%e") == "a%20b%2Fc%3Dd%25e"
    assert escape_segment("x\tü") == "x%09ü"
    assert escape_segment("Aa0-_.~") == "Aa0-_.~"


@pytest.mark.parametrize("unit", ["a", "<", "ü", "模"])
def test_a_name_too_long_for_a_folder_is_shortened_with_its_hash(unit: str) -> None:
    name = "tests.test_x.<locals>." + unit * 300
    value = kernel_value(name)
    folder = f"kernel={value}"
    assert NAME_MAX - 3 <= len(folder.encode()) <= NAME_MAX  # as much as fits, no escape or character cut
    assert value.endswith("~" + hashlib.sha256(name.encode()).hexdigest()[:16])
    assert value.startswith(escape_segment("tests.test_x.<locals>." + unit))
    assert kernel_value(name + unit) != value and kernel_value(name) == value
    fits = "m." + "k" * (NAME_MAX - len("kernel=m."))
    assert kernel_value(fits) == fits and kernel_value(fits + "k") != fits + "k"
