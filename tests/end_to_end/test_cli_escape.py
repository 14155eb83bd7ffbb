"""Control characters stored in a history never reach the terminal raw; machine output keeps them exactly.

The rows are written through the store API, the way any program (or a hand-edited history) could: a tag,
argv, a kernel qualname and source line, an error message and a replay message holding a screen clear and an
OSC window-title sequence.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import pytest

from tests import store_helpers
from tests.end_to_end.conftest import Output, tilelens_in_process
from tilelens.commands.escape import escape, escape_lines
from tilelens.store import History

EVIL = "\x1b[2J\x1b]0;title\x07"
SHOWN = "\\x1b[2J\\x1b]0;title\\x07"
RAW = [chr(c) for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)) if chr(c) != "\n"] + ["\u202e"]


def test_escape_writes_every_control_character_as_an_escape() -> None:
    assert escape(EVIL) == SHOWN
    assert escape("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert escape("\x00\x7f\x80\x9b\u202e\u2028") == "\\x00\\x7f\\x80\\x9b\\u202e\\u2028"
    text = "matmul_kernel [red]x[/red] é ü → ∑ 中文 \\x1b"  # markup-like, non-ASCII, a literal backslash
    assert escape(text) == text
    for ch in RAW:
        assert all(c.isprintable() for c in escape(ch)), repr(ch)
    assert escape_lines(f"first {EVIL}\nsecond\r\n") == [f"first {SHOWN}", "second\\r", ""]


@pytest.fixture
def evil_history(tmp_path: Path) -> tuple[list[object], dict[str, int]]:
    db = tmp_path / "evil.db"
    source = f"def odd_kernel(x_ptr):  # {EVIL}\n    pass\n"
    k = store_helpers.kernel(qualname=f"odd{EVIL}kernel", source=source)
    info = store_helpers.run_info(tag=f"tag{EVIL}")
    info.argv = ["train.py", f"--name={EVIL}"]
    with History.open(str(db)) as h:
        run = h.begin_run(info)
        launch = h.write_launch(run, store_helpers.launch(k=k, status="error", error=f"boom{EVIL}\nline two"))
        h.write_replay(launch, outcome="mismatch", device="cpu", backend="interpreter", message=f"bad{EVIL}")
        h.finish_run(run, "failed", 1)
    return ["--db", db, "--blobs", tmp_path / "blobs"], {"run": run, "launch": launch}


def _clean(out: Output) -> str:
    """The whole output, checked to hold no control character but newlines."""
    for stream in (out.stdout, out.stderr):
        bad = sorted({c for c in stream if c != "\n" and not c.isprintable()})
        assert bad == [], (bad, stream)
    return out.stdout + out.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["ls"], [f"odd{SHOWN}kernel"]),
        (["ls", "--runs"], [f"tag{SHOWN}", f"--name={SHOWN}"]),
        (["show", "{launch}"], [f"odd{SHOWN}kernel", f"tag {'tag'}{SHOWN}", f"boom{SHOWN}", "line two"]),
        (["show", "{launch}", "--source"], [f"# {SHOWN}"]),
        (["sql", "SELECT tag, argv FROM runs"], [f"tag{SHOWN}", "--name=\\u001b[2J"]),  # argv: JSON text
        (["sql", "SELECT error FROM launches"], [f"boom{SHOWN}\\nline two"]),
        (["sql", f"SELECT '{EVIL}' AS \"col{EVIL}\""], [f"col{SHOWN}"]),
    ],
)
def test_human_output_escapes_control_characters(
    evil_history: tuple[list[object], dict[str, int]], args: list[str], expected: list[str]
) -> None:
    location, ids = evil_history
    out = tilelens_in_process(*location, *(a.format(**ids) for a in args))
    assert out.returncode == 0, out.stderr
    text = _clean(out)
    for piece in expected:
        assert piece in text, (piece, text)


def test_error_lines_escape_what_the_user_gave(tmp_path: Path) -> None:
    out = tilelens_in_process("--db", tmp_path / f"no{EVIL}where.db", "ls")
    assert out.returncode == 2
    assert f"no{SHOWN}where.db" in _clean(out)


def test_json_keeps_the_exact_text(evil_history: tuple[list[object], dict[str, int]]) -> None:
    location, ids = evil_history
    (run,) = json.loads(tilelens_in_process(*location, "ls", "--runs", "--json").stdout)
    assert (run["tag"], run["argv"]) == (f"tag{EVIL}", ["train.py", f"--name={EVIL}"])
    detail = json.loads(tilelens_in_process(*location, "show", ids["launch"], "--json").stdout)
    assert (detail["qualname"], detail["error"]) == (f"odd{EVIL}kernel", f"boom{EVIL}\nline two")
    assert detail["replays"][0]["message"] == f"bad{EVIL}"
    (row,) = json.loads(
        tilelens_in_process(*location, "sql", "SELECT tag FROM runs", "--format", "json").stdout
    )
    assert row == {"tag": f"tag{EVIL}"}


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_csv_is_exact_in_a_pipe_and_escaped_on_a_terminal(
    evil_history: tuple[list[object], dict[str, int]],
) -> None:
    location, _ = evil_history
    query = ["sql", "SELECT tag, error FROM launch_overview", "--format", "csv"]
    piped = tilelens_in_process(*location, *query)
    assert list(csv.reader(io.StringIO(piped.stdout))) == [
        ["tag", "error"],
        [f"tag{EVIL}", f"boom{EVIL}\nline two"],
    ]

    from tilelens.cli import main

    terminal, err = _Terminal(), io.StringIO()
    with contextlib.redirect_stdout(terminal), contextlib.redirect_stderr(err):
        assert main([str(a) for a in (*location, *query)]) == 0
    shown = _clean(Output(0, terminal.getvalue(), err.getvalue()))
    assert list(csv.reader(io.StringIO(shown))) == [
        ["tag", "error"],
        [f"tag{SHOWN}", f"boom{SHOWN}\\nline two"],
    ]
