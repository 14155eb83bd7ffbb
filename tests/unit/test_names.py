"""One kernel-name matcher: ``ls --kernel`` and ``replay --kernel`` select the same kernels, on any backend."""

from __future__ import annotations

import dataclasses

import pytest

from tests import store_helpers
from tilelens.store import History
from tilelens.store.read.launches import select_launches
from tilelens.store.read.query import open_query
from tilelens.store.sql.names import matches


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


# -- linear time (issue 47, point 4) -------------------------------------------------------------------------


class _Counted(str):
    """A str that counts how often a character of it is looked at."""

    looks = 0

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        _Counted.looks += 1
        return str.__getitem__(self, key)


@pytest.mark.parametrize(
    "pattern", ["*" * 15 + "x", "*" * 511 + "x", "*a" * 200 + "b", "a*" * 100 + "b", "?*" * 150 + "x"]
)
def test_matching_work_is_bounded_by_pattern_times_name(pattern: str) -> None:
    """The regular expression ``*`` made ``.*`` backtracked exponentially: ``***************x`` took 38 s.
    Counted, not timed: the matcher looks at no more than (pattern + 1) x (name + 1) characters of each."""
    from tilelens.store.sql.names import check_pattern, glob_match

    name = "a" * 300
    _Counted.looks = 0
    assert not glob_match(_Counted(check_pattern(pattern)), _Counted(name))
    assert _Counted.looks <= 2 * (len(pattern) + 1) * (len(name) + 1)
    assert matches(pattern, "m", "a" * 300) is False


def test_runs_of_stars_are_one_star() -> None:
    from tilelens.store.sql.names import check_pattern

    assert check_pattern("a***b**") == "a*b*"
    assert matches("***matmul***", "pkg", "matmul_kernel")
    assert matches("pkg.**.matmul_kernel", "pkg.ops", "matmul_kernel")


def test_a_pattern_too_long_to_be_a_name_is_one_line(history: History) -> None:
    from tests.end_to_end.conftest import one_line_error, tilelens_in_process
    from tilelens.errors import UsageError

    with pytest.raises(UsageError, match=r"^kernel name pattern is 5,000 characters long; at most 512"):
        matches("*" * 5000, "m", "k")
    where = ["--db", history.location.db_url, "--blobs", history.location.blobs_dir]
    for command in (["ls"], ["replay"], ["diff", "--source-sha", "a", "b"], ["trace"]):
        line = one_line_error(tilelens_in_process(*where, *command, "--kernel", "*" * 5000))
        assert "kernel name pattern is 5,000 characters long" in line, (command, line)
    assert tilelens_in_process(*where, "ls", "--kernel", "*" * 20 + "x").returncode == 0
