"""Child processes and tests in the history: revision 0007, the start-up hook, the run tree, node-id filters."""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config

from tests import store_helpers
from tilelens.api import open_query, run_tree
from tilelens.config import resolve_location
from tilelens.core.recording import children
from tilelens.store import History

REPO = Path(__file__).resolve().parents[2]


def test_setup_ships_the_same_hook_line_and_pyproject_the_plugin_entry_point() -> None:
    tree = ast.parse((REPO / "setup.py").read_text())
    (line,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "LINE"
    ]
    assert line == children.HOOK_LINE
    pyproject = (REPO / "pyproject.toml").read_text()  # (tomllib is 3.11+)
    section = pyproject[pyproject.index("[project.entry-points.pytest11]") :].split("\n\n")[0]
    assert section.splitlines()[1:] == ['"tilelens.pytest_plugin" = "tilelens.pytest_plugin"']


def test_a_0002_history_is_upgraded_keeps_its_launches_and_reads_before_and_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "old.db"
    monkeypatch.setenv("TILELENS_DB", str(db))
    monkeypatch.setenv("TILELENS_BLOBS", str(tmp_path / "blobs"))
    command.upgrade(Config(str(REPO / "alembic.ini")), "0002")
    with sqlite3.connect(db) as conn:  # a run and a launch written by the 0002 code
        conn.execute(
            "INSERT INTO runs (id, argv, cwd, host, pid, versions, status, started_at) "
            "VALUES (1, '[]', '/', 'h', 1, '{}', 'ok', '2026-01-01 00:00:00')"
        )
        conn.execute(
            "INSERT INTO kernels (id, module, qualname, file, def_line, source_sha256, source, created_at) "
            "VALUES (1, 'm', 'k', 'f', 1, 'x', 's', '2026-01-01 00:00:00')"
        )
        conn.execute(
            "INSERT INTO launches (id, run_id, kernel_id, seq, role, status, backend, device, grid_x, grid_y, "
            "grid_z, config, loads, stores, atomics, load_lanes, store_lanes, atomic_lanes, bytes_loaded, "
            "bytes_stored, oob_lanes, events, lanes, started_at, duration_s, created_at) VALUES (1, 1, 1, 0, "
            "'launch', 'ok', 'interpreter', 'cpu', 1, 1, 1, '{}', 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, "
            "'2026-01-01 00:00:00', 0, '2026-01-01 00:00:00')"
        )
    location = resolve_location()
    with open_query() as q:  # an older history stays readable: no test, no parent
        (old,) = q.launches()
        assert (old.id, old.test_nodeid) == (1, None)
        assert [(r.id, r.parent_run_id) for r in q.runs()] == [(1, None)]
    with History.open(location=location) as h:
        child = h.begin_run(store_helpers.run_info())
        with h.engine.connect() as conn:
            conn.exec_driver_sql(f"UPDATE runs SET parent_run_id = 1 WHERE id = {child}")
            conn.commit()
        rec = store_helpers.launch()
        rec.test_nodeid = "tests/test_a.py::test_x[1-%_]"
        new_id = h.write_launch(child, rec)
        tree = run_tree(h, 1)
        assert tree.run_ids == [1, child] and tree.child_runs == 1
        assert tree.launches == 2 and tree.oob_lanes == 3 + rec.summary.oob_lanes
        assert [(t.nodeid, t.launches) for t in tree.tests] == [(rec.test_nodeid, 1)]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT launch_id, test_nodeid FROM launch_overview ORDER BY 1").fetchall() == [
            (1, None),
            (new_id, rec.test_nodeid),
        ]
        assert conn.execute("SELECT run_id, parent_run_id FROM run_overview ORDER BY 1").fetchall() == [
            (1, None),
            (child, 1),
        ]
    with open_query() as q:
        for pattern, found in [
            ("test_x", [new_id]),  # a substring
            ("tests/*::test_x[?-%_]", [new_id]),  # wildcards over the whole id; % and _ are themselves
            ("tests/*::test_x[?-__]", []),
            ("test_a.py", [new_id]),
            ("*test_y*", []),
        ]:
            assert [launch.id for launch in q.launches(test=pattern)] == found, pattern


def test_a_pth_start_up_hook_records_the_child_into_the_parents_history(tmp_path: Path) -> None:
    """The .pth line, run by python's site machinery from a site directory, begins a linked child run."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / children.HOOK_PTH).write_text(children.HOOK_LINE)
    db = tmp_path / "h.db"
    with History.open(str(db), tmp_path / "blobs") as h:
        parent = h.begin_run(store_helpers.run_info())
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO)
    env[children.ENV] = json.dumps({"db": f"sqlite:///{db}", "blobs": str(tmp_path / "blobs"), "run": parent})
    code = (
        f"import site; site.addsitedir({str(site_dir)!r}); import torch; from tests.kernels import add_kernel; "
        "x = torch.arange(8.0); out = torch.empty(8); add_kernel[(1,)](x, x, out, 8, BLOCK=8); "
        "print(out.tolist())"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([2.0 * i for i in range(8)])
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id, parent_run_id, status FROM runs ORDER BY id").fetchall() == [
            (parent, None, "running"),
            (parent + 1, parent, "ok"),
        ]
        assert conn.execute("SELECT run_id, seq, grid_x FROM launches").fetchall() == [(parent + 1, 0, 1)]


def test_the_pytest_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, tilelens.pytest_plugin; "
        "print(sorted(m for m in ('torch', 'triton', 'sqlalchemy', 'alembic') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.stdout == "[]\n", proc.stderr


def test_the_plugin_passes_on_oob_to_the_sessions_recording(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--tilelens-on-oob`` reaches ``Recording(on_oob=...)`` as given (None: the project's setting)."""
    import types

    from tilelens import api, pytest_plugin

    made: list[dict[str, object]] = []

    class FakeRecording:
        def __init__(self, *args: object, **kwargs: object) -> None:
            made.append(kwargs)

        def __enter__(self) -> FakeRecording:
            return self

    class Config:
        invocation_params = types.SimpleNamespace(args=("t.py",))

        def __init__(self, on_oob: str | None) -> None:
            self.options = {
                "tilelens": True,
                "tilelens_db": None,
                "tilelens_tag": None,
                "tilelens_on_oob": on_oob,
                "tilelens_check": False,
                "tilelens_coverage": None,
            }
            self.stash = pytest.Stash()

        def getoption(self, name: str, default: object = None) -> object:
            return self.options[name]

    monkeypatch.setattr(api, "Recording", FakeRecording)
    for value in ("raise", "record", None):
        pytest_plugin.pytest_configure(Config(value))  # type: ignore[arg-type]
    assert [m["on_oob"] for m in made] == ["raise", "record", None]
    assert all(m["follow_children"] is True for m in made)
