"""The pytest plugin (entry point ``pytest11``): ``pytest --tilelens`` records every Triton launch of the tests.

Each launch carries the node id of the test it ran in (``launches.test_nodeid``), in any session that records:
``pytest --tilelens`` and ``tilelens record -m pytest`` alike. With pytest-xdist the controller's run is the
session's run and every worker records a run of its own linked to it (``parent_run_id``), through the child
process hook of :mod:`tilelens.core.recording.children`. At the end a TileLens section in the terminal summary counts the
whole session (launches, kernels, out-of-bounds lanes, the tests with out-of-bounds lanes), and
``--tilelens-fail-on-oob`` fails a session in which any lane was out of bounds. ``--tilelens-check`` (which
records, as ``--tilelens`` does) checks each test's launches as ``tilelens check`` does, right after each phase of
the test (set-up, call, tear-down), and fails the phase whose launches have findings, with them in its report.
``--tilelens-coverage[=DIR]`` (which records, with each kernel's executed lines) prints ``tilelens coverage``'s
table for the session's launches at the end, and writes its HTML report into DIR when given (an empty or new
folder, or an earlier coverage report, which is replaced). Give DIR with ``=``: a bare word after the option
is taken as DIR.

Loaded in every pytest session once TileLens is installed, so importing it must cost nothing: it imports only
pytest and :mod:`tilelens.core.session`; torch, Triton and the store load only when ``--tilelens`` is given.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from tilelens.core import session as recording

_REC = pytest.StashKey[Any]()
_TREE = pytest.StashKey[Any]()
_FAILED_ON_OOB = pytest.StashKey[bool]()
_COVERAGE = pytest.StashKey[list[str]]()  # the coverage summary's lines, for the terminal summary
_CHECKED = pytest.StashKey[int]()  # on a test item: how many of the recording's launches were checked


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
    group.addoption(
        "--tilelens-check",
        action="store_true",
        default=False,
        help="Record, and fail each test whose launches have races, hazards or out-of-bounds lanes "
        "(as `tilelens check` finds them).",
    )
    group.addoption(
        "--tilelens-coverage",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="Record with each kernel's executed lines; at the end print kernel coverage (as `tilelens "
        "coverage`) and, with =DIR, write its HTML report into DIR.",
    )


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("tilelens", False) or _checking(config) or _covering(config))


def _covering(config: pytest.Config) -> bool:
    return config.getoption("tilelens_coverage", None) is not None


def _checking(config: pytest.Config) -> bool:
    return bool(config.getoption("tilelens_check", False))


def pytest_configure(config: pytest.Config) -> None:
    if not _enabled(config):
        return
    from tilelens.core.recording import child, children

    if hasattr(
        config, "workerinput"
    ):  # an xdist worker: it records a run of its own, linked to the session's
        if os.environ.get(children.ENV):
            child.start()  # a no-op where the start-up hook already began it
        return
    active = recording.active()
    if active is not None:  # `tilelens record -m pytest --tilelens`: that recording is the run
        if _covering(config) and hasattr(active, "coverage") and not active.coverage:
            active.coverage = True
            children.options_changed(active)  # xdist workers start after this: they capture lines too
        return
    from tilelens import api

    rec = api.Recording(
        config.getoption("tilelens_db"),
        None,
        tag=config.getoption("tilelens_tag"),
        argv=["pytest", *config.invocation_params.args],
        follow_children=True,
        on_oob=config.getoption("tilelens_on_oob"),
        coverage=_covering(config),
    )
    rec.__enter__()
    config.stash[_REC] = rec


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    recording.set_nodeid(item.nodeid)
    if _checking(item.config):
        item.stash[_CHECKED] = len(getattr(recording.active(), "launch_ids", ()))
    try:
        yield
    finally:
        recording.set_nodeid(None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    if not _checking(item.config):
        return
    lines = _check_new_launches(item)
    if not lines:
        return
    report = outcome.get_result()
    text = "\n".join(
        _printable(line) for line in ["tilelens check: findings in this test's launches", *lines]
    )
    if report.passed:
        report.outcome = "failed"
        report.longrepr = text
    else:
        report.sections.append(("tilelens check", text))


def _check_new_launches(item: pytest.Item) -> list[str]:
    """``tilelens check``'s lines for the launches recorded since the last check of this test (none: [])."""
    rec = recording.active()
    ids, history = getattr(rec, "launch_ids", None), getattr(rec, "history", None)
    if ids is None or history is None:  # not a recording (a bare sink), or not one yet
        return []
    flush = getattr(rec, "flush", None)
    if flush is not None:
        flush()  # a compiled recording's queued launches: written before they are read
    start = item.stash.get(_CHECKED, len(ids))
    new, item.stash[_CHECKED] = list(ids[start:]), len(ids)
    if not new:
        return []
    from tilelens import api

    with api.open_query(location=history.location) as q:
        checks = [c for c in api.check_launches(q, new) if c.findings]
    return [line for c in checks for line in api.check_lines(c)]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not _enabled(config) or hasattr(config, "workerinput"):
        return
    from tilelens import api

    rec = config.stash.get(_REC, None)
    if rec is not None:
        rec.exit_code = int(exitstatus)
        del config.stash[_REC]
        rec.__exit__(None, None, None)
    else:
        rec = recording.active()
    if rec is None or getattr(rec, "run_id", None) is None:
        return
    # A run_id (checked above) means a recording, not a bare Sink.
    tree = api.run_tree(rec.history, rec.run_id)  # type: ignore[union-attr]
    config.stash[_TREE] = (rec, tree)
    if config.getoption("tilelens_fail_on_oob") and tree.oob_lanes and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        config.stash[_FAILED_ON_OOB] = True
    if _covering(config):
        config.stash[_COVERAGE] = _coverage_lines(rec.history.location, tree.run_ids, config)  # type: ignore[union-attr]


def _coverage_lines(location: Any, run_ids: list[int], config: pytest.Config) -> list[str]:
    """``tilelens coverage``'s lines for the session's runs, after writing the HTML report if asked; a failure
    (nothing launched, a folder that cannot be written) is one line, never the session's error."""
    from tilelens import api
    from tilelens.errors import TileLensError

    folder = config.getoption("tilelens_coverage") or None
    try:
        with api.open_query(location=location) as q:
            report = api.coverage(q, runs=run_ids)
        lines = api.coverage_lines(report)
        if folder is not None:
            api.write_coverage_html(report, folder)
            lines.append(f"HTML report: {folder}/index.html")
    except TileLensError as exc:
        return [f"coverage: {exc}"]
    return lines


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _enabled(config):
        return
    from tilelens.core.recording import child

    if hasattr(config, "workerinput"):
        child.end()  # the worker's run ends with its session, however the worker process then exits
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
    workers = f" and {_n(tree.child_runs, 'child run')}" if tree.child_runs else ""
    tr.write_line(
        f"run {rec.run_id}{workers}: {_n(tree.launches, 'launch', 'launches')} of "
        f"{_n(len(tree.launches_per_kernel), 'kernel')}, {_n(tree.errors, 'error')}, "
        f"{_n(tree.oob_lanes, 'out-of-bounds lane')}"
    )
    oob_tests = [t for t in tree.tests if t.oob_lanes]
    for t in oob_tests:
        tr.write_line(
            f"  {_printable(t.nodeid)}: {_n(t.launches, 'launch', 'launches')}, {_n(t.kernels, 'kernel')}, "
            f"{_n(t.oob_lanes, 'OOB lane')}",
            red=True,
        )
    for line in config.stash.get(_COVERAGE, []):
        tr.write_line(_printable(line))
    location = rec.history.location
    tr.write_line(f"history: {_printable(str(location.sqlite_path or location.display_url()))}")
    if config.stash.get(_FAILED_ON_OOB, False):
        tr.write_line(
            "--tilelens-fail-on-oob: out-of-bounds lanes were recorded; the session fails", red=True
        )


def _n(n: int, one: str, many: str | None = None) -> str:
    """``1 launch``, ``2 launches`` (as tilelens.commands.render.counted; the plugin imports no command)."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def _printable(text: str) -> str:
    """Control characters (a parametrized test's id can hold any) shown escaped, never sent to the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
