"""``tilelens sql``: queries and views work; anything that would write is refused by the database itself."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.end_to_end.conftest import ROOT, Recorded, one_line_error, tilelens

DOCS_SECTION = "## Example queries"  # in docs/sql.md


def documented_queries() -> list[str]:
    text = (ROOT / "docs" / "sql.md").read_text()
    section = text.split(DOCS_SECTION, 1)[1].split("\n## ", 1)[0]
    return [q.strip() for q in re.findall(r"```sql\n(.*?)```", section, re.DOTALL)]


def test_docs_have_at_least_five_queries() -> None:
    assert len(documented_queries()) >= 5


@pytest.mark.parametrize("query", documented_queries())
def test_documented_queries_run(examples_history: Recorded, query: str) -> None:
    out = examples_history.main("sql", query, "--format", "json")
    assert out.returncode == 0, out.stderr
    assert isinstance(json.loads(out.stdout), list)


def test_views_answer_the_common_questions(examples_history: Recorded) -> None:
    def rows(query: str) -> list[dict]:
        out = examples_history.main("sql", query, "-f", "json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    (oob,) = rows("SELECT launch_id, kernel, grid, oob_lanes, tag FROM oob_launches")
    assert oob == {
        "launch_id": examples_history.ids["shift_kernel"][0],
        "kernel": "oob_bug.shift_kernel",
        "grid": "(4, 1, 1)",
        "oob_lanes": 56,
        "tag": "examples",
    }
    (choice,) = rows("SELECT kernel, configs, chosen, launch_id FROM autotune_choices")
    assert (choice["kernel"], choice["configs"]) == ("autotuned_matmul.matmul_kernel", 2)
    assert json.loads(choice["chosen"])["kwargs"]["BLOCK_M"] == 32
    assert choice["launch_id"] == examples_history.ids["matmul_kernel"][-1]
    overview = rows(
        "SELECT kernel, count(*) AS n FROM launch_overview GROUP BY kernel ORDER BY n DESC, kernel"
    )
    assert overview[0] == {"kernel": "autotuned_matmul.matmul_kernel", "n": 3}
    (run,) = rows("SELECT launches, kernels, errors, oob_lanes FROM run_overview")
    assert run == {"launches": 8, "kernels": 5, "errors": 0, "oob_lanes": 56}


def test_formats(examples_history: Recorded) -> None:
    query = "SELECT id, qualname FROM kernels ORDER BY id"
    proc = examples_history.cli("sql", query, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    table = list(csv.reader(io.StringIO(proc.stdout)))
    assert table[0] == ["id", "qualname"] and table[1] == ["1", "add_kernel"] and len(table) == 6
    text = examples_history.main("sql", query)
    assert "add_kernel" in text.stdout and "(5 rows)" in text.stderr
    assert examples_history.main("sql", query, "--format", "xml").returncode == 2


def fingerprint(db: Path) -> tuple[str, dict[str, int]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        counts = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
    conn.close()
    return hashlib.sha256(db.read_bytes()).hexdigest(), counts


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory, examples_recording: Recorded) -> Path:
    """A copy of the examples history that the refusal tests try to damage (PostgreSQL: test_pg_gate.py)."""
    folder = tmp_path_factory.mktemp("victim")
    with sqlite3.connect(examples_recording.db) as src, sqlite3.connect(folder / "h.db") as dst:
        src.backup(dst)  # a consistent copy, WAL included
    dst.close()
    return folder / "h.db"


@pytest.mark.parametrize(
    ("statement", "verb"),
    [
        ("DELETE FROM launches", "DELETE"),
        ("UPDATE runs SET tag = 'x'", "UPDATE"),
        ("DROP TABLE launch_args", "DROP"),
        ("DROP VIEW launch_overview", "DROP"),
        ("INSERT INTO runs (id) VALUES (99)", "INSERT"),
        ("REPLACE INTO blobs VALUES ('a', 'b', 1, 1, 'now')", "REPLACE"),
        ("ATTACH DATABASE 'other.db' AS other", "ATTACH"),
        ("PRAGMA user_version = 7", "PRAGMA user_version = 7"),
        ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode = DELETE"),
        ("PRAGMA query_only = OFF", "PRAGMA query_only = OFF"),
        ("CREATE TABLE notes (x)", "CREATE"),
        ("CREATE TEMP TABLE notes (x)", "CREATE"),
        ("VACUUM INTO 'copy.db'", "VACUUM"),
        ("WITH doomed AS (SELECT id FROM runs) DELETE FROM runs WHERE id IN doomed", "DELETE runs"),
    ],
)
def test_writes_are_refused_and_change_nothing(victim: Path, statement: str, verb: str) -> None:
    before = fingerprint(victim)
    proc = tilelens("--db", victim, "sql", statement, cwd=victim.parent)
    line = one_line_error(proc)
    assert line == f"tilelens: error: refused {verb}: the history is open read-only, nothing was changed"
    assert fingerprint(victim) == before
    assert sorted(p.name for p in victim.parent.iterdir() if not p.name.startswith("h.db")) == []


def test_several_statements_and_bad_sql(examples_history: Recorded) -> None:
    line = one_line_error(examples_history.cli("sql", "SELECT 1; DELETE FROM runs"))
    assert line == "tilelens: error: SQL error: one statement at a time"
    line = one_line_error(examples_history.main("sql", "SELECT 1 FROM runs; SELECT 2"))
    assert line == "tilelens: error: SQL error: one statement at a time"
    line = one_line_error(examples_history.main("sql", "SELEC 1"))
    assert (
        line
        == {
            "sqlite": 'tilelens: error: SQL error: near "SELEC": syntax error',
            "postgresql": 'tilelens: error: SQL error: syntax error at or near "SELEC"',
        }[examples_history.backend]
    )
    line = one_line_error(examples_history.main("sql", "SELECT nope FROM launches"))
    assert (
        line
        == {
            "sqlite": "tilelens: error: SQL error: no such column: nope",
            "postgresql": 'tilelens: error: SQL error: column "nope" does not exist',
        }[examples_history.backend]
    )


def test_reading_pragmas_are_allowed(examples_recording: Recorded) -> None:
    out = examples_recording.main(
        "sql", "SELECT name FROM pragma_table_info('launches') WHERE name = 'oob_lanes'"
    )
    assert out.returncode == 0 and "oob_lanes" in out.stdout
    assert examples_recording.main("sql", "PRAGMA table_info(runs)").returncode == 0


def test_a_history_without_views_says_how_to_get_them(examples_recording: Recorded, tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    shutil.copy(examples_recording.db, db)
    with sqlite3.connect(db) as conn:
        for view in ("oob_launches", "launch_overview", "autotune_choices", "run_overview"):
            conn.execute(f"DROP VIEW {view}")
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    conn.close()
    line = one_line_error(tilelens("--db", db, "sql", "SELECT * FROM oob_launches"))
    assert "no such table: oob_launches" in line and "tilelens db upgrade" in line
