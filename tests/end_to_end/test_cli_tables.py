"""``tilelens tables``: every column of every table and view says what it holds, in one line."""

from __future__ import annotations

from pathlib import Path

from tests.end_to_end.conftest import tilelens_in_process
from tilelens import api
from tilelens.store import History
from tilelens.store.sql.columns import DESCRIPTIONS


def test_every_column_of_every_table_and_view_is_described(tmp_path: Path) -> None:
    History.open(str(tmp_path / "h.db"), tmp_path / "blobs").close()  # a fresh history: the newest schema
    with api.open_query(str(tmp_path / "h.db"), str(tmp_path / "blobs")) as q:
        found = q.tables()
    assert {"launches", "launch_overview", "run_overview", "trace_events"} <= {t.name for t in found}
    missing = [f"{t.name}.{c.name}" for t in found for c in t.columns if not c.description]
    assert missing == []
    # and no line describes a column the schema does not have (a renamed or dropped one)
    columns = {(t.name, c.name) for t in found for c in t.columns}
    assert [(t, c) for t, cs in DESCRIPTIONS.items() for c in cs if (t, c) not in columns] == []


def test_tables_prints_one_line_per_column(tmp_path: Path) -> None:
    History.open(str(tmp_path / "h.db"), tmp_path / "blobs").close()
    out = tilelens_in_process("--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs", "tables", "replays")
    assert out.returncode == 0, out.stderr
    lines = [line.rstrip() for line in out.stdout.splitlines()]
    assert lines[0] == "replays  table, 12 columns"
    assert lines[1].split() == ["id", "integer", "the", "replay"]
    assert lines[5].split() == [
        "outcome",
        "varchar(16)",
        "match,",
        "mismatch,",
        "error",
        "or",
        "unknown-read",
    ]
    assert len(lines) == 13
