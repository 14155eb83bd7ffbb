"""One kernel-name matcher: ``ls --kernel`` and ``replay --kernel`` select the same kernels, on any backend."""

from __future__ import annotations

import dataclasses

import pytest

from tests import store_helpers
from tilelens.store import History
from tilelens.store.launches import select_launches
from tilelens.store.names import matches
from tilelens.store.query import open_query


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("matmul_kernel", True),  # qualname
        ("pkg.ops.matmul_kernel", True),  # module.qualname
        ("ops.matmul_kernel", False),  # a suffix of the module is not a name
        ("mat*", True),
        ("*mul*", True),
        ("pkg.*", True),  # '*' crosses dots
        ("matmul_kerne?", True),
        ("matmul_kerne", False),  # whole names only
        ("Matmul_kernel", False),  # case counts, as in Python
        ("MAT*", False),
        ("matmul.kernel", False),  # '.' is a dot, not any character
        ("*", True),
    ],
)
def test_matches(name: str, expected: bool) -> None:
    assert matches(name, "pkg.ops", "matmul_kernel") is expected


def test_regex_characters_are_literal() -> None:
    assert matches("k[0]+", "m", "k[0]+")
    assert not matches("k[0]+", "m", "k0")
    assert matches("Outer.<locals>.k", "m", "Outer.<locals>.k")


def test_ls_and_replay_select_the_same_kernels(history: History) -> None:
    kernels = [
        dataclasses.replace(store_helpers.kernel("matmul_kernel"), module="pkg.ops"),
        dataclasses.replace(store_helpers.kernel("matmul_small"), module="pkg.ops"),
        dataclasses.replace(store_helpers.kernel("Matmul_kernel"), module="other"),
        store_helpers.kernel("add_kernel"),
    ]
    run = history.begin_run(store_helpers.run_info())
    ids = {k.qualname: history.write_launch(run, store_helpers.launch(k=k)) for k in kernels}
    expected = {
        "matmul_kernel": ["matmul_kernel"],
        "mat*": ["matmul_kernel", "matmul_small"],
        "pkg.ops.*": ["matmul_kernel", "matmul_small"],
        "?atmul_kernel": ["matmul_kernel", "Matmul_kernel"],
        "*_kernel": ["matmul_kernel", "Matmul_kernel", "add_kernel"],
        "tests.kernels.add_kernel": ["add_kernel"],
        "nothing*": [],
    }
    with open_query(location=history.location) as q:
        for name, qualnames in expected.items():
            want = sorted(ids[n] for n in qualnames)
            assert sorted(launch.id for launch in q.launches(kernel=name)) == want, name
            assert select_launches(history, kernel=name) == want, name
