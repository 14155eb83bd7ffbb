"""The documents a newcomer reads: their runnable examples run, and their links lead somewhere.

A fenced ```` ```sh ```` block in README.md or docs/*.md is *runnable* when the line just before its fence is a
marker comment:

* ``<!-- runnable -->``: the block runs in a folder holding a copy of ``examples/`` in which
  ``tilelens record examples/run_all.py`` already ran (what the README's tour does first: run 1, launches 1 to
  6, oldest first: add, softmax, matmul, two heuristics launches, the out-of-bounds shift);
* ``<!-- runnable: fresh -->``: the same folder without a history.

Options after the colon, separated by spaces: ``exit=N`` (``<!-- runnable: exit=1 -->``) says the block ends with
status N (``tilelens diff`` of two different launches exits 1; any other block must exit 0); ``needs=postgres``
says it starts a PostgreSQL server of its own (Debian's binaries), so it skips where the PostgreSQL tests skip,
and fails there under ``CI=true`` as they do (tests/conftest.py). Each block runs with ``bash -e -o pipefail``
in a copy of its folder of its own, so blocks neither see nor disturb each other's history, with
``TILELENS_DB``/``TILELENS_BLOBS`` naming that folder's ``.tilelens`` (where ``tilelens`` would look anyway).

A ```` ```text ```` block right after a runnable block (blank lines between allowed) is its stated output: each
non-blank line of it must appear in what the block printed (stdout and stderr together), runs of spaces counting
as one and ``...`` standing for any text within a line.

Links: every relative Markdown link in README.md, BENCHMARKS.md and docs/*.md names a file that exists, and a
``#fragment`` names a heading of the target (GitHub's anchors).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.end_to_end.conftest import EXAMPLES, ROOT
from tests.postgres import missing_reason

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINKED = [*DOCS, ROOT / "BENCHMARKS.md"]
MARKER = re.compile(r"^<!--\s*runnable(?::\s*(?P<options>[^>]*?))?\s*-->\s*$")
FENCE = re.compile(r"^(`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
BLOCK_TIMEOUT_S = 300


@dataclass(frozen=True)
class Example:
    path: Path
    line: int  # of the opening fence, 1-based
    script: str
    fresh: bool
    exit_code: int
    needs: tuple[str, ...]
    output: tuple[str, ...]  # the stated output's non-blank lines

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


@dataclass(frozen=True)
class Fenced:
    start: int  # index of the opening fence line
    end: int  # index of the closing fence line
    info: str
    body: str


def fenced_blocks(lines: list[str]) -> list[Fenced]:
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        fence = match.group(1)
        end = i + 1
        while end < len(lines) and not lines[end].startswith(fence):
            end += 1
        blocks.append(Fenced(i, end, match.group("info"), "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return blocks


NEEDS = ("postgres",)


def parse_options(text: str | None, where: str) -> tuple[bool, int, tuple[str, ...]]:
    fresh, exit_code, needs = False, 0, []
    for option in (text or "").split():
        if option == "fresh":
            fresh = True
        elif option.startswith("exit="):
            exit_code = int(option.removeprefix("exit="))
        elif option.startswith("needs=") and option.removeprefix("needs=") in NEEDS:
            needs.append(option.removeprefix("needs="))
        else:
            raise AssertionError(f"{where}: unknown runnable option {option!r}")
    return fresh, exit_code, tuple(needs)


def runnable_examples(path: Path) -> list[Example]:
    lines = path.read_text().splitlines()
    blocks = fenced_blocks(lines)
    examples = []
    for n, block in enumerate(blocks):
        match = MARKER.match(lines[block.start - 1]) if block.start > 0 else None
        if match is None:
            continue
        where = f"{path.relative_to(ROOT)}:{block.start + 1}"
        assert block.info == "sh", f"{where}: a runnable marker must precede a ```sh block"
        fresh, exit_code, needs = parse_options(match.group("options"), where)
        output: tuple[str, ...] = ()
        following = blocks[n + 1] if n + 1 < len(blocks) else None
        if (
            following is not None
            and following.info == "text"
            and all(not line.strip() for line in lines[block.end + 1 : following.start])
        ):
            output = tuple(line for line in following.body.splitlines() if line.strip())
        examples.append(Example(path, block.start + 1, block.body, fresh, exit_code, needs, output))
    return examples


def all_examples() -> list[Example]:
    return [example for path in DOCS for example in runnable_examples(path)]


def markers_in(path: Path) -> int:
    """Marker comments outside fenced blocks (a marker that precedes no block is a mistake)."""
    lines = path.read_text().splitlines()
    inside = {i for b in fenced_blocks(lines) for i in range(b.start, b.end + 1)}
    return sum(1 for i, line in enumerate(lines) if i not in inside and MARKER.match(line))


def collapse(text: str) -> str:
    return re.sub(r"[ \t]+", " ", text.strip())


def stated_line_pattern(line: str) -> re.Pattern[str]:
    parts = [re.escape(collapse(part)) for part in line.split("...")]
    return re.compile(".*?".join(parts))


def block_env(folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("COLUMNS", None)  # the documented tables are what a pipe gets
    env["TILELENS_DB"] = str(folder / ".tilelens" / "tilelens.db")
    env["TILELENS_BLOBS"] = str(folder / ".tilelens" / "blobs")
    # `tilelens` and `python` of the environment running the tests, activated or not
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_block(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=folder,
        env=block_env(folder),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """The two starting folders, by ``fresh``: examples/ only, and examples/ recorded once."""
    fresh = tmp_path_factory.mktemp("docs-fresh")
    shutil.copytree(EXAMPLES, fresh / "examples")
    recorded = tmp_path_factory.mktemp("docs-recorded")
    shutil.copytree(EXAMPLES, recorded / "examples")
    proc = run_block("tilelens record examples/run_all.py\n", recorded)
    assert proc.returncode == 0, proc.stdout
    return {True: fresh, False: recorded}


def require(needs: tuple[str, ...]) -> None:
    """Skip (fail under CI=true) when what a block needs is missing, as the PostgreSQL tests do."""
    if "postgres" not in needs:
        return
    reason = missing_reason()
    if reason is None and not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        reason = "the block starts Debian's PostgreSQL server (/usr/lib/postgresql/*/bin), not installed here"
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI must run the PostgreSQL example: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.mark.parametrize("example", all_examples(), ids=lambda e: e.id)
def test_runnable_example(example: Example, folders: dict[bool, Path], tmp_path: Path) -> None:
    require(example.needs)
    folder = tmp_path / "work"
    shutil.copytree(folders[example.fresh], folder, symlinks=True)
    proc = run_block(example.script, folder)
    shown = f"{example.id}\n$ {example.script}\n{proc.stdout}"
    assert proc.returncode == example.exit_code, shown
    printed = collapse("\n".join(collapse(line) for line in proc.stdout.splitlines()))
    for line in example.output:
        assert stated_line_pattern(line).search(printed), f"stated output not printed: {line!r}\n{shown}"


def test_runnable_examples_are_found() -> None:
    """The marker is read as written: every marker precedes a runnable block, and there are blocks to run."""
    examples = all_examples()
    for path in DOCS:
        assert markers_in(path) == sum(1 for e in examples if e.path == path), path
    assert len(examples) >= 15
    assert any(e.path.name == "README.md" for e in examples)
    assert any(e.output for e in examples)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (``-`` and ``_`` kept), spaces as ``-``."""
    text = re.sub(r"`|\[|\]\([^)]*\)", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    lines = path.read_text().splitlines()
    inside = {i for b in fenced_blocks(lines) for i in range(b.start, b.end + 1)}
    found: set[str] = set()
    for i, line in enumerate(lines):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if i in inside or match is None:
            continue
        anchor, n = github_anchor(match.group(1)), 1
        while anchor in found:  # a repeated heading gets -1, -2, ...
            anchor = f"{github_anchor(match.group(1))}-{n}"
            n += 1
        found.add(anchor)
    return found


def relative_links(path: Path) -> list[tuple[int, str]]:
    """``(line, target)`` of every Markdown link outside code that is not a URL."""
    lines = path.read_text().splitlines()
    inside = {i for b in fenced_blocks(lines) for i in range(b.start, b.end + 1)}
    links = []
    for i, line in enumerate(lines):
        if i in inside:
            continue
        prose = re.sub(r"`[^`]*`", "", line)
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                links.append((i + 1, target))
    return links


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for line, target in relative_links(path):
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{path.name}:{line}: {target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{path.name}:{line}: {target}: no heading #{fragment} in {linked.name}")
    assert not broken, "\n".join(broken)


def test_anchor_rules() -> None:
    assert github_anchor("SQL across traces: `trace_events`") == "sql-across-traces-trace_events"
    assert github_anchor("What replay runs (the trust rule)") == "what-replay-runs-the-trust-rule"
    assert github_anchor("Back-pressure") == "back-pressure"
