"""Traces on demand (``tilelens trace``): a compiled launch interpreted from its before-snapshot.

Recorded with ``backend="compiled"`` through the CPU stand-in runner of ``tests/unit/test_compiled_recording``
(this machine has no GPU); the derived trace must equal the trace the interpreter records for the same inputs,
and the derivation is stored as a replay.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sqlalchemy import select

import tilelens
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tests.unit.test_compiled_recording import StandIn, scale_kernel
from tilelens.replay.traces import first_difference
from tilelens.store import History
from tilelens.store.sql.models import Launch, LaunchArg, Replay


def _run(tmp_path: Path, backend: str, **options: object) -> list[int]:
    x = torch.arange(50, dtype=torch.float32)
    y = torch.zeros(50)
    extra = {"runner": StandIn()} if backend == "compiled" else {}
    with tilelens.Recording(
        str(tmp_path / "h.db"),
        tmp_path / "b",
        backend=backend,
        **extra,
        **options,  # type: ignore[arg-type]
    ) as rec:
        scale_kernel[(2,)](x, y, 50, 3.0, BLOCK=32)
    assert torch.equal(y, x * 3.0)
    return list(rec.launch_ids)


def test_derived_trace_equals_the_interpreter_recorded_trace(tmp_path: Path) -> None:
    (compiled,) = _run(tmp_path, "compiled")
    (interpreted,) = _run(tmp_path, "interpreter")
    with History.open(str(tmp_path / "h.db"), tmp_path / "b") as h:
        (result,) = tilelens.derive_traces(h, [compiled])
        assert result.outcome == "match", result.message
        assert result.derived_trace and result.message.startswith("access trace derived and stored")
        with h.session() as s:
            rows = {r.id: r for r in s.execute(select(Launch)).scalars()}
            derived, recorded = rows[compiled], rows[interpreted]
            assert derived.trace_derived is True and recorded.trace_derived is None
            assert derived.backend == "compiled"
            for column in ("loads", "stores", "load_lanes", "store_lanes", "bytes_loaded", "bytes_stored"):
                assert getattr(derived, column) == getattr(recorded, column), column
            assert (derived.loads, derived.stores, derived.load_lanes) == (2, 2, 50)
            access = {
                a.name: a.access
                for a in s.execute(select(LaunchArg).where(LaunchArg.launch_id == compiled)).scalars()
            }
            assert access["x_ptr"]["load_lanes"] == 50 and access["y_ptr"]["store_lanes"] == 50
            replay = s.execute(select(Replay)).scalar_one()
            assert (replay.launch_id, replay.outcome, replay.device) == (compiled, "match", "cpu")
        names = {0: "x_ptr", 1: "y_ptr"}
        assert (
            first_difference(
                h.blobs.get_table(recorded.trace_blob), h.blobs.get_table(derived.trace_blob), names
            )
            is None
        )
        # A second call leaves the stored trace alone.
        (again,) = tilelens.derive_traces(h, [compiled])
        assert again.outcome == "match" and not again.derived_trace and "already has" in again.message


def test_launch_without_snapshots_cannot_be_traced(tmp_path: Path) -> None:
    (launch_id,) = _run(tmp_path, "compiled", snapshots="none")
    with History.open(str(tmp_path / "h.db"), tmp_path / "b") as h:
        (result,) = tilelens.derive_traces(h, [launch_id])
        assert result.outcome == "error" and "no before snapshot" in result.message
        with h.session() as s:
            assert s.execute(select(Launch.trace_blob)).scalar_one() is None


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TILELENS_DB", str(tmp_path / "h.db"))
    monkeypatch.setenv("TILELENS_BLOBS", str(tmp_path / "b"))
    return tmp_path


def test_cli_show_export_and_trace(cli_env: Path) -> None:
    (launch_id,) = _run(cli_env, "compiled")
    shown = tilelens_in_process("show", launch_id)
    assert shown.returncode == 0, shown.stderr
    assert f"derive it with `tilelens trace {launch_id}`" in shown.stdout
    out = cli_env / "t.csv"
    exported = tilelens_in_process("export", launch_id, "-o", out)
    assert f"derive it with `tilelens trace {launch_id}`" in one_line_error(exported)
    traced = tilelens_in_process("trace", launch_id)
    assert traced.returncode == 0, traced.stderr
    assert "access trace derived and stored" in traced.stdout
    exported = tilelens_in_process("export", launch_id, "-o", out)
    assert exported.returncode == 0, exported.stderr
    assert "trace  " in tilelens_in_process("show", launch_id).stdout
    assert "derive it" not in tilelens_in_process("show", launch_id).stdout
    assert tilelens_in_process("trace").returncode == 2  # neither IDs nor --run: usage error


def test_record_rejects_a_bad_backend_or_snapshot_mode(cli_env: Path) -> None:
    script = cli_env / "empty.py"
    script.write_text("print('ran')\n")
    bad = tilelens_in_process("record", "--backend", "gpu", script)
    assert "--backend" in one_line_error(bad) and "ran" not in bad.stdout
    bad = tilelens_in_process("record", "--backend", "compiled", "--snapshots", "most", script)
    assert "--snapshots" in one_line_error(bad)
