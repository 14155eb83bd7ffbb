"""``tilelens repro``: a folder that reproduces a recorded launch with torch, Triton and numpy alone, and
``tilelens replay --python``, which replays through it in another interpreter."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tilelens
from tests.end_to_end.conftest import one_line_error
from tests.end_to_end.conftest import tilelens as run_cli
from tests.end_to_end.test_replay_scripts import HELPERS, SCRIPT
from tilelens.store import History


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The replay tests' script (four kernels: a jit helper from another module and a constexpr global, an
    autotuned and a heuristics kernel), recorded once."""
    folder = tmp_path_factory.mktemp("repro")
    (folder / "helpers.py").write_text(HELPERS)
    (folder / "s.py").write_text(SCRIPT.format(marker=str(folder / "ran.txt")))
    proc = run_cli(
        "--db", folder / "h.db", "--blobs", folder / "blobs", "record", "s.py", "--n", "96", cwd=folder
    )
    assert proc.returncode == 0, proc.stderr
    return folder


@pytest.fixture(scope="module")
def python_without_tilelens(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A virtual environment that sees this one's torch, Triton and numpy (its site-packages on sys.path,
    through a .pth line, so the .pth files there, TileLens's editable finder among them, never run) and not
    TileLens: nothing is installed, so nothing is downloaded."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    target = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True
    ).stdout.strip()
    Path(target, "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import torch, triton, numpy\ntry:\n import tilelens\nexcept ImportError:\n print('no tilelens')",
        ],
        capture_output=True,
        text=True,
        cwd=venv,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},  # a checkout on it would be seen
    )
    assert probe.stdout.strip() == "no tilelens", probe.stderr
    return str(python)


def _repro(folder: Path, launch: int, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "--db", folder / "h.db", "--blobs", folder / "blobs", "repro", str(launch), "-o", out, *extra
    )


def test_every_launch_reproduces_without_tilelens(
    recorded: Path, python_without_tilelens: str, tmp_path: Path
) -> None:
    with History.open(str(recorded / "h.db"), recorded / "blobs") as h:
        ids = tilelens.select_launches(h)
    assert len(ids) == 4
    for launch in ids:
        out = tmp_path / f"r{launch}"
        proc = _repro(recorded, launch, out)
        assert proc.returncode == 0, proc.stderr
        assert sorted(p.name for p in out.iterdir()) == [
            "expected_0.npy",
            "repro.json",
            "repro.py",
            "storage0.npy",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TILELENS") and k != "PYTHONPATH"}
        done = subprocess.run(
            [python_without_tilelens, "repro.py"],
            capture_output=True,
            text=True,
            cwd=out,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        first, second = done.stdout.splitlines()
        assert first.startswith("recorded with Triton ") and " replayed with Triton " in first
        assert second.startswith(f"match: launch {launch} (__main__.") and second.endswith("bit for bit")
        manifest = json.loads((out / "repro.json").read_text())
        assert manifest["bundle"]["entry"] == f"__main__:{manifest['kernel']['qualname']}"
    # The autotuned launch runs with the recorded config, the heuristics one with the recorded value.
    tuned = json.loads((tmp_path / f"r{ids[2]}" / "repro.json").read_text())
    assert tuned["kernel"]["qualname"] == "tuned" and tuned["constexprs"] == {"BLOCK": 32}
    guessed = json.loads((tmp_path / f"r{ids[3]}" / "repro.json").read_text())
    assert guessed["constexprs"] == {"BLOCK": 32, "EVEN": False}


def test_a_changed_output_is_reported_with_its_first_difference(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert _repro(recorded, 1, out).returncode == 0
    import numpy as np

    expected = np.load(out / "expected_0.npy")
    as_floats = expected.view(np.float32).copy()
    as_floats[5] += 1.0
    np.save(out / "expected_0.npy", as_floats.view(np.uint8))
    done = subprocess.run(
        [sys.executable, "repro.py", "--json"], capture_output=True, text=True, cwd=out, timeout=600
    )
    assert done.returncode == 1, done.stderr
    result = json.loads(done.stdout)
    assert result["outcome"] == "mismatch" and result["first"] == {"arg": "x_ptr", "element": 5}
    assert result["max_abs_err"] == 1.0 and "1 of 96 elements differ" in result["message"]


class _Payload:
    """Unpickling it opens (creates) a marker file: what loading a .npy of Python objects could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def test_a_npy_of_python_objects_is_refused_and_runs_nothing(recorded: Path, tmp_path: Path) -> None:
    """The folder's arrays are numbers only: an edited one holding Python objects is refused by repro.py's
    loads, and the code its unpickling would run never runs."""
    import numpy as np

    out = tmp_path / "r"
    assert _repro(recorded, 1, out).returncode == 0
    marker = tmp_path / "ran"
    np.save(out / "storage0.npy", np.array([_Payload(marker)], dtype=object), allow_pickle=True)
    done = subprocess.run([sys.executable, "repro.py"], capture_output=True, text=True, cwd=out, timeout=600)
    assert done.returncode == 1 and "Object arrays cannot be loaded" in done.stdout, done.stdout + done.stderr
    assert not marker.exists()


def test_replay_through_another_python_stores_both_versions(
    recorded: Path, python_without_tilelens: str
) -> None:
    where = ("--db", recorded / "h.db", "--blobs", recorded / "blobs")
    proc = run_cli(*where, "replay", "1", "--python", python_without_tilelens, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["outcome"] == "match" and "recorded with Triton" in result["message"]
    with History.open(str(recorded / "h.db"), recorded / "blobs") as h, h.session() as s:
        from sqlalchemy import select

        from tilelens.store.sql.models import Replay

        row = s.execute(select(Replay).order_by(Replay.id.desc())).scalars().first()
        assert row is not None and row.outcome == "match"
        assert row.versions["python_path"] == python_without_tilelens
        assert row.versions["recorded"]["triton"] == row.versions["triton"]  # here both are this Triton


def test_a_relative_python_is_found_from_the_callers_folder(
    recorded: Path, python_without_tilelens: str
) -> None:
    """CI's cross-Triton check names ``.venv-triton-3.6.0/bin/python``: the repro runs in a folder of its own,
    so a relative path must be made absolute against the caller's folder first (not resolved: a venv's
    interpreter is a link to a Python without that venv)."""
    python = Path(python_without_tilelens)
    where = ("--db", recorded / "h.db", "--blobs", recorded / "blobs")
    relative = python.relative_to(python.parents[2])
    proc = run_cli(*where, "replay", "1", "--python", relative, "--json", cwd=python.parents[2])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "match"
    with History.open(str(recorded / "h.db"), recorded / "blobs") as h, h.session() as s:
        from sqlalchemy import select

        from tilelens.store.sql.models import Replay

        row = s.execute(select(Replay).order_by(Replay.id.desc())).scalars().first()
        assert row is not None and row.versions["python_path"] == str(python)


def _replay_rows(recorded: Path) -> int:
    with History.open(str(recorded / "h.db"), recorded / "blobs") as h:
        return h.counts()["replays"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer where there is no CUDA device")
def test_a_replay_that_cannot_start_in_the_other_python_stores_nothing(
    recorded: Path, python_without_tilelens: str
) -> None:
    where = ("--db", recorded / "h.db", "--blobs", recorded / "blobs")
    before = _replay_rows(recorded)
    line = one_line_error(
        run_cli(*where, "replay", "1", "--python", python_without_tilelens, "--device", "cuda")
    )
    assert line.startswith(f"tilelens: error: launch 1 cannot be replayed with {python_without_tilelens}: ")
    assert line.endswith("cuda requested but no CUDA device is available here")
    line = one_line_error(
        run_cli(*where, "replay", "1", "--python", python_without_tilelens, "--device", "tpu")
    )
    assert line == "tilelens: error: unknown device 'tpu'; use cpu or cuda[:N]"
    assert _replay_rows(recorded) == before


def test_bad_input_is_one_line_and_writes_nothing(recorded: Path, tmp_path: Path) -> None:
    where = ("--db", recorded / "h.db", "--blobs", recorded / "blobs")
    assert "no launch 999" in one_line_error(_repro(recorded, 999, tmp_path / "none"))
    assert not (tmp_path / "none").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("keep")
    line = one_line_error(_repro(recorded, 1, busy))
    assert "is not an empty folder" in line and [p.name for p in busy.iterdir()] == ["mine.txt"]
    assert _repro(recorded, 1, busy, "--force").returncode == 0 and not (busy / "mine.txt").exists()
    blocked = tmp_path / "a-file"
    blocked.write_text("x")
    assert "not a writable folder" in one_line_error(_repro(recorded, 1, blocked / "sub"))
    line = one_line_error(run_cli(*where, "replay", "1", "--python", sys.executable + "-missing"))
    assert line.startswith("tilelens: error: --python ") and "cannot run it" in line
    line = one_line_error(run_cli(*where, "replay", "1", "--python", "/bin/true"))
    assert "did not answer as a Python does" in line


def test_a_launch_without_snapshots_cannot_be_reproduced(tmp_path: Path) -> None:
    from tests.unit.test_compiled_recording import StandIn, scale_kernel

    with tilelens.Recording(
        str(tmp_path / "h.db"), tmp_path / "b", backend="compiled", snapshots="none", runner=StandIn()
    ):
        scale_kernel[(1,)](torch.ones(8), torch.zeros(8), 8, 2.0, BLOCK=8)
    line = one_line_error(
        run_cli("--db", tmp_path / "h.db", "--blobs", tmp_path / "b", "repro", "1", "-o", tmp_path / "r")
    )
    assert "recorded without tensor snapshots" in line and not (tmp_path / "r").exists()
