"""Global options anywhere on the line, and one way every command fails: one line, the error's exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import store_helpers
from tilelens import errors
from tilelens.cli import main
from tilelens.store import History


def run_cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, Path, int]:
    """A history with one launch, its blobs in a folder that is not the default one beside the database."""
    db, blobs = tmp_path / "h.db", tmp_path / "elsewhere"
    with History.open(str(db), blobs) as h:
        launch = h.write_launch(h.begin_run(store_helpers.run_info(tag="t")), store_helpers.launch())
    return db, blobs, launch


@pytest.mark.parametrize("where", ["before", "after"])
def test_db_and_blobs_before_or_after_the_command(
    small: tuple[Path, Path, int], where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db, blobs, launch = small
    location = ["--db", db, "--blobs", blobs]

    def line(*command: object) -> list[object]:
        return [*location, *command] if where == "before" else [*command, *location]

    code, out, _ = run_cli(capsys, *line("ls", "--json"))
    assert code == 0 and [r["id"] for r in json.loads(out)] == [launch]
    code, out, _ = run_cli(capsys, *line("show", launch, "--json"))
    assert code == 0 and json.loads(out)["id"] == launch
    code, out, _ = run_cli(capsys, *line("db", "current", "--json"))
    assert code == 0 and json.loads(out)["blobs"] == str(blobs) and json.loads(out)["counts"]["launches"] == 1
    code, out, _ = run_cli(capsys, *line("db", "upgrade", "--json"))
    assert code == 0 and json.loads(out)["db"] == f"sqlite:///{db}"


def test_the_option_after_the_command_wins(
    small: tuple[Path, Path, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, blobs, launch = small
    code, out, _ = run_cli(
        capsys, "--db", tmp_path / "other.db", "ls", "--json", "--db", db, "--blobs", blobs
    )
    assert code == 0 and [r["id"] for r in json.loads(out)] == [launch]
    assert not (tmp_path / "other.db").exists()


def test_debug_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "ls", "--db", tmp_path / "none.db", "--debug")
    assert code == 2 and "Traceback" in err and "NoHistoryError" in err
    assert err.strip().splitlines()[-1] == f"tilelens: error: no TileLens history at {tmp_path / 'none.db'}"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["ls", "--no-such-option"], "No such option"),
        (["ls", "--status", "bogus"], "--status"),
        (["show"], "show takes a launch ID or --last-oob"),
        (["show", "not-a-number"], "Invalid value for '"),
        (["no-such-command"], "no-such-command"),
        (["db", "upgrade", "--db"], "--db"),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("tilelens: error: ") and needle in err and "╭" not in err


def test_every_tilelens_error_ends_the_same_way(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tilelens.api

    class Odd(errors.TileLensError):
        exit_code = 3

    def fail(*_: object, **__: object) -> None:
        raise Odd("the  message\\nwith\n spaces")

    monkeypatch.setattr(tilelens.api, "open_query", fail)
    code, out, err = run_cli(capsys, "ls")
    assert (code, out, err) == (3, "", "tilelens: error: the message\\nwith spaces\n")


def test_anything_else_is_a_bug_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import tilelens.api

    def fail(*_: object, **__: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(tilelens.api, "open_query", fail)
    with pytest.raises(KeyError, match="a bug"):
        main(["ls"])


def test_error_family() -> None:
    """One base carrying the exit code; each concept one class, whatever layer raises it."""
    for name in dir(errors):
        cls = getattr(errors, name)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == errors.__name__:
            assert issubclass(cls, errors.TileLensError), name
            # 2 for every input error; an interrupted query ends as a shell's Ctrl-C does; OutOfBoundsError,
            # raised into a recorded program, with the status of --fail-on-oob
            special = {errors.QueryInterruptedError: 130, errors.OutOfBoundsError: 3}
            assert cls.exit_code == special.get(cls, 2), name
    from tilelens import config, runner
    from tilelens.replay import LaunchNotFoundError as from_replay
    from tilelens.store.read import query
    from tilelens.store.sql import readonly

    assert (
        config.LocationError is errors.LocationError
        and runner.ProgramNotFoundError is errors.ProgramNotFoundError
    )
    assert query.LaunchNotFoundError is from_replay is errors.LaunchNotFoundError
    assert readonly.QueryError is errors.QueryError and not hasattr(query, "UnknownLaunchError")


def test_replay_selections_that_find_nothing(
    small: tuple[Path, Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    db, blobs, launch = small
    where = ["--db", db, "--blobs", blobs]
    code, out, err = run_cli(capsys, "replay", "--kernel", "nothing*", *where)
    assert (code, out, err) == (2, "", "tilelens: error: no launches of nothing* to replay\n")
    code, out, err = run_cli(capsys, "replay", launch + 1, *where)
    assert (code, out) == (
        2,
        "",
    ) and err == f"tilelens: error: no launch {launch + 1} in history {db}\n"
    empty = db.with_name("empty.db")
    History.open(str(empty)).close()
    code, out, err = run_cli(capsys, "replay", "--last", "--db", empty)
    assert (code, out, err) == (2, "", "tilelens: error: the history has no runs to replay\n")


def test_a_mistyped_command_is_suggested_once(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "lss")
    assert (code, out) == (2, "")
    assert err == "tilelens: error: No such command 'lss'. Did you mean 'ls'? (see tilelens --help)\n"


def test_every_command_lists_the_global_options_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Typer builds them from each command's signature, on any typer from 0.12 on."""
    for argv in (["replay"], ["db", "upgrade"], ["doctor"], ["repro"], ["record"]):
        code, out, _ = run_cli(capsys, *argv, "--help")
        assert code == 0 and all(option in out for option in ("--db", "--blobs", "--debug")), argv


COMMANDS = [["record"], ["ls"], ["show"], ["sql"], ["export"], ["replay"], ["trace"], ["repro"], ["gc"]]
COMMANDS += [["serve"], ["report"], ["diff"], ["tables"], ["doctor"], ["db", "upgrade"], ["db", "current"]]


@pytest.mark.parametrize("columns", ["80", "200"])
def test_help_keeps_brackets_and_prints_examples_as_written(
    columns: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    code, out, _ = run_cli(capsys, "record", "--help")
    assert code == 0 and "default: [tool.tilelens] tag" in " ".join(out.split())
    assert "(default, or [tool.tilelens] autotune)" in " ".join(out.split())
    with_examples = 0
    for argv in COMMANDS:
        code, out, _ = run_cli(capsys, *argv, "--help")
        assert code == 0, argv
        lines = out.splitlines()
        if "  Examples:" not in lines:
            continue
        with_examples += 1
        block = lines[lines.index("  Examples:") + 2 :]
        block = block[: block.index("")]
        assert block and all(line.startswith("    ") and line[4] != " " for line in block), (argv, block)
        assert any(line.startswith("    tilelens ") for line in block), argv
    assert with_examples >= 12


def test_an_option_given_without_its_optional_value_gets_an_empty_one() -> None:
    """``ls --test`` alone lists tests: the empty value goes in before any typer or click parses."""
    from tilelens.cli import _with_optional_values as fill

    assert fill(["ls", "--test"]) == ["ls", "--test", ""]
    assert fill(["--db", "h.db", "ls", "--test", "--json"]) == ["--db", "h.db", "ls", "--test", "", "--json"]
    assert fill(["ls", "--test", "tests/x.py::*"]) == ["ls", "--test", "tests/x.py::*"]
    assert fill(["ls", "--", "--test"]) == ["ls", "--", "--test"]
    assert fill(["show", "--test"]) == ["show", "--test"]  # only the options that take an optional value
