"""The pytest plugin (entry point ``pytest11``): ``pytest --tilelens`` records every Triton launch of the tests.

Each launch carries the node id of the test it ran in (``launches.test_nodeid``), in any session that records:
``pytest --tilelens`` and ``tilelens record -m pytest`` alike. With pytest-xdist the controller's run is the
session's run and every worker records a run of its own linked to it (``parent_run_id``), through the child
process hook of :mod:`tilelens.core.children`. At the end a TileLens section in the terminal summary counts the
whole session (launches, kernels, out-of-bounds lanes, the tests with out-of-bounds lanes), and
``--tilelens-fail-on-oob`` fails a session in which any lane was out of bounds.

Loaded in every pytest session once TileLens is installed, so importing it must cost nothing: it imports only
pytest and :mod:`tilelens.core.testid`; torch, Triton and the store load only when ``--tilelens`` is given.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tilelens.core import testid

_REC = pytest.StashKey[Any]()
_TREE = pytest.StashKey[Any]()
_FAILED_ON_OOB = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tilelens", "TileLens: record every Triton kernel launch of the tests")
    group.addoption(
        "--tilelens",
        action="store_true",
        default=False,
        help="Record every Triton launch (xdist workers too).",
    )
    group.addoption(
        "--tilelens-db", metavar="URL", default=None, help="History database (default as tilelens)."
    )
    group.addoption("--tilelens-tag", metavar="T", default=None, help="Label the session's run.")
    group.addoption(
        "--tilelens-on-oob",
        choices=("record", "raise"),
        default=None,
        help="Out-of-bounds lanes: record them (default) or raise in the launching test.",
    )
    group.addoption(
        "--tilelens-fail-on-oob",
        action="store_true",
        default=False,
        help="Fail the session when any recorded lane was out of bounds.",
    )


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("tilelens", False))


def pytest_configure(config: pytest.Config) -> None:
    if not _enabled(config):
        return
    from tilelens.core import children, session

    if hasattr(
        config, "workerinput"
    ):  # an xdist worker: it records a run of its own, linked to the session's
        if os.environ.get(children.ENV):
            children.start()  # a no-op where the start-up hook already began it
        return
    if session.active() is not None:  # `tilelens record -m pytest --tilelens`: that recording is the run
        return
    from tilelens import api

    rec = api.Recording(
        config.getoption("tilelens_db"),
        None,
        tag=config.getoption("tilelens_tag"),
        argv=["pytest", *config.invocation_params.args],
        follow_children=True,
        on_oob=config.getoption("tilelens_on_oob"),
    )
    rec.__enter__()
    config.stash[_REC] = rec


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    testid.set_current(item.nodeid)
    try:
        yield
    finally:
        testid.set_current(None)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not _enabled(config) or hasattr(config, "workerinput"):
        return
    from tilelens import api
    from tilelens.core import session as recording_session

    rec = config.stash.get(_REC, None)
    if rec is not None:
        rec.exit_code = int(exitstatus)
        del config.stash[_REC]
        rec.__exit__(None, None, None)
    else:
        rec = recording_session.active()
    if rec is None or getattr(rec, "run_id", None) is None:
        return
    # A run_id (checked above) means a recording, not a bare Sink.
    tree = api.run_tree(rec.history, rec.run_id)  # type: ignore[union-attr]
    config.stash[_TREE] = (rec, tree)
    if config.getoption("tilelens_fail_on_oob") and tree.oob_lanes and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        config.stash[_FAILED_ON_OOB] = True


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _enabled(config):
        return
    from tilelens.core import children

    if hasattr(config, "workerinput"):
        children.end()  # the worker's run ends with its session, however the worker process then exits
    rec = config.stash.get(_REC, None)
    if rec is not None:  # the session never finished (a usage error): the run still ends
        del config.stash[_REC]
        rec.__exit__(None, None, None)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    found = config.stash.get(_TREE, None)
    if found is None:
        return
    rec, tree = found
    tr = terminalreporter
    tr.write_sep("=", "TileLens")
    workers = (
        f" and {tree.child_runs} child run{'s' if tree.child_runs != 1 else ''}" if tree.child_runs else ""
    )
    kernels = len(tree.launches_per_kernel)
    tr.write_line(
        f"run {rec.run_id}{workers}: {tree.launches} launch{'es' if tree.launches != 1 else ''} of "
        f"{kernels} kernel{'s' if kernels != 1 else ''}, {tree.errors} errors, "
        f"{tree.oob_lanes:,} out-of-bounds lanes"
    )
    oob_tests = [t for t in tree.tests if t.oob_lanes]
    for t in oob_tests:
        tr.write_line(
            f"  {_printable(t.nodeid)}: {t.launches} launches, {t.kernels} kernels, {t.oob_lanes:,} OOB lanes",
            red=True,
        )
    location = rec.history.location
    tr.write_line(f"history: {_printable(str(location.sqlite_path or location.display_url()))}")
    if config.stash.get(_FAILED_ON_OOB, False):
        tr.write_line(
            "--tilelens-fail-on-oob: out-of-bounds lanes were recorded; the session fails", red=True
        )


def _printable(text: str) -> str:
    """Control characters (a parametrized test's id can hold any) shown escaped, never sent to the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
