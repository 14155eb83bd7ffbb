"""Replay runs no code because a history says so (issue 12, items 4 and 5).

Each attack edits a recorded history the way anyone holding the file could, or ships a project folder with a
history in it, and checks that the code it points at never runs (a marker file it would write stays absent),
that the answer is one line with exit status 2, and that honest replays still match.
"""

from __future__ import annotations

import hashlib
import json
import runpy
import sqlite3
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import tilelens
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tests.end_to_end.conftest import tilelens as run_cli
from tilelens.replay import replay_launch
from tilelens.store import History

KERNEL = """
@triton.jit
def bump_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * 2.0, mask=mask)
"""

GUARDED = (
    '"""A kernel defined in a script with a __main__ guard."""\n'
    "import torch\nimport triton\nimport triton.language as tl\n\n"
    + KERNEL
    + """

if __name__ == "__main__":
    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty(100)
    bump_kernel[(4,)](x, out, 100, BLOCK=32)
"""
)


def _payload(marker: Path) -> str:
    """Top-level code an attacker wants run: it leaves a marker file behind."""
    return f"with open({str(marker)!r}, 'a') as _f:\n    _f.write('ran\\n')\n"


def _where(folder: Path) -> dict[str, str]:
    return {"db": str(folder / "h.db"), "blobs": str(folder / "blobs")}


def _record(script: Path, where: dict[str, str]) -> int:
    with tilelens.record(**where) as rec:
        runpy.run_path(str(script), run_name="__main__")
    (launch,) = rec.launch_ids
    return launch


def _edit(where: dict[str, str], sql: str, *params: object) -> None:
    """What anyone holding the history file can do."""
    with sqlite3.connect(where["db"]) as conn:
        conn.execute(sql, params)
    conn.close()


def _cli(where: dict[str, str], *argv: object):  # noqa: ANN202
    return tilelens_in_process("--db", where["db"], "--blobs", where["blobs"], *argv)


@pytest.fixture
def guarded(tmp_path: Path) -> tuple[dict[str, str], Path, int]:
    script = tmp_path / "bump.py"
    script.write_text(GUARDED)
    where = _where(tmp_path)
    return where, script, _record(script, where)


# -- item 4: code run unasked --------------------------------------------------------------------------------


def test_kernels_file_edited_to_another_file_is_refused_before_it_runs(
    guarded: tuple[dict[str, str], Path, int], tmp_path: Path
) -> None:
    where, _, launch = guarded
    marker = tmp_path / "ran.txt"
    evil = tmp_path / "evil.py"
    evil.write_text(_payload(marker))
    _edit(where, "UPDATE kernels SET file = ?", str(evil))
    line = one_line_error(_cli(where, "replay", launch))
    assert f"recorded file {evil} does not define bump_kernel" in line
    assert not marker.exists()


def test_forged_file_and_hash_load_only_the_definitions_of_the_other_file(
    guarded: tuple[dict[str, str], Path, int], tmp_path: Path
) -> None:
    """Even pointing at a file that defines the kernel, with its hash forged to match, runs no statement of it."""
    where, _, launch = guarded
    marker = tmp_path / "ran.txt"
    evil = tmp_path / "evil.py"
    head = "import triton\nimport triton.language as tl\n"
    evil.write_text(head + _payload(marker) + "\n" + KERNEL + _payload(marker))  # the kernel at its lines
    _edit(where, "UPDATE kernels SET file = ?", str(evil))
    _edit(where, "UPDATE launches SET kernel_file_sha256 = ?", hashlib.sha256(evil.read_bytes()).hexdigest())
    with History.open(**where) as h:
        r = replay_launch(h, launch)
    assert r.outcome == "match", r.message
    assert r.skipped == "skipped 2 top-level statements of evil.py (lines 3-4, 13-14)"
    assert r.message.endswith("; " + r.skipped)
    assert not marker.exists()


def test_relative_path_in_a_received_folder_is_not_resolved_against_the_working_directory(
    tmp_path: Path,
) -> None:
    """A project folder received with a .tilelens/ history and a helper .py next to it."""
    made = tmp_path / "made"
    made.mkdir()
    (made / "bump.py").write_text(GUARDED)
    where = {"db": str(made / ".tilelens" / "tilelens.db"), "blobs": str(made / ".tilelens" / "blobs")}
    launch = _record(made / "bump.py", where)
    received = tmp_path / "received"
    (made / ".tilelens").rename(tmp_path / "tl")
    received.mkdir()
    (tmp_path / "tl").rename(received / ".tilelens")
    marker = tmp_path / "ran.txt"
    helper = received / "helper.py"
    helper.write_text("import triton\nimport triton.language as tl\n" + _payload(marker) + KERNEL)
    db = received / ".tilelens" / "tilelens.db"
    _edit({"db": str(db)}, "UPDATE kernels SET file = 'helper.py'")
    _edit(
        {"db": str(db)},
        "UPDATE launches SET kernel_file_sha256 = ?",
        hashlib.sha256(helper.read_bytes()).hexdigest(),
    )
    here = ("--db", ".tilelens/tilelens.db", "--blobs", ".tilelens/blobs")  # what ./.tilelens resolves to
    line = one_line_error(run_cli(*here, "replay", launch, cwd=received))
    assert "'helper.py' is a relative path" in line and "working directory" in line
    assert not marker.exists()
    # Code kept inside the history's own folder is refused even by absolute path.
    inside = received / ".tilelens" / "helper.py"
    helper.rename(inside)
    _edit({"db": str(db)}, "UPDATE kernels SET file = ?", str(inside))
    line = one_line_error(run_cli(*here, "replay", launch, cwd=received))
    assert "holds history data" in line
    assert not marker.exists()


def test_module_this_is_never_imported(guarded: tuple[dict[str, str], Path, int], tmp_path: Path) -> None:
    where, script, launch = guarded
    _edit(where, "UPDATE kernels SET module = 'this'")
    location = ("--db", where["db"], "--blobs", where["blobs"])
    proc = run_cli(*location, "replay", launch)  # a fresh process: `this` prints when it is imported
    assert "Beautiful is better than ugly" not in proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stderr  # the recorded file still defines the kernel: loaded from there
    # With the file pointing at this.py as well, nothing is left that defines the kernel.
    this_py = Path(sys.modules["os"].__file__).with_name("this.py")
    _edit(where, "UPDATE kernels SET file = ?", str(this_py))
    _edit(
        where, "UPDATE launches SET kernel_file_sha256 = ?", hashlib.sha256(this_py.read_bytes()).hexdigest()
    )
    proc = run_cli(*location, "replay", launch)
    line = one_line_error(proc)
    assert "module this" in line and "does not define bump_kernel" in line
    assert "Beautiful is better than ugly" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda src, payload: payload + src, id="prepended"),
        pytest.param(lambda src, payload: src + payload, id="appended"),
        pytest.param(
            lambda src, payload: src.replace(
                "BLOCK: tl.constexpr)", f"BLOCK: tl.constexpr, _=exec({payload!r}))"
            ),
            id="default-value",
        ),
        pytest.param(
            lambda src, payload: src.replace("BLOCK: tl.constexpr)", f"BLOCK: exec({payload!r}))"),
            id="annotation",
        ),
    ],
)
@pytest.mark.parametrize("stored", ["bundle", "kernel-row"])
def test_code_added_to_the_stored_source_never_runs(
    guarded: tuple[dict[str, str], Path, int], tmp_path: Path, edit, stored: str
) -> None:  # noqa: ANN001
    """``--from-history`` runs the launch's bundle, or the kernel row's source for a record made before
    bundles were kept: code added to either never runs, even once its hash is forged to match."""
    where, _, launch = guarded
    marker = tmp_path / "ran.txt"
    with sqlite3.connect(where["db"]) as conn:
        (source,) = conn.execute("SELECT source FROM kernels").fetchone()
    conn.close()
    forged = edit(source, _payload(marker))
    assert forged != source
    if stored == "bundle":
        with sqlite3.connect(where["db"]) as conn:
            (blob,) = conn.execute("SELECT bundle_blob FROM launches WHERE id = ?", (launch,)).fetchone()
        conn.close()
        with History.open(**where) as h:
            bundle = json.loads(h.blobs.get_table(blob).column("bundle")[0].as_py())
            (entry,) = [u for u in bundle["units"] if u["key"] == bundle["entry"]]
            entry["source"] = forged
            new_blob = h.blobs.put_table(pa.table({"bundle": [json.dumps(bundle)]}), "bundle")
        _edit(where, "UPDATE launches SET bundle_blob = ?", new_blob)
    else:
        _edit(where, "UPDATE launches SET bundle_blob = NULL")
        _edit(where, "UPDATE kernels SET source = ?", forged)
    line = one_line_error(_cli(where, "replay", launch, "--from-history", "--trust-source"))
    assert "does not hash to the recorded source_sha256" in line
    _edit(where, "UPDATE kernels SET source_sha256 = ?", hashlib.sha256(forged.encode()).hexdigest())
    line = one_line_error(_cli(where, "replay", launch, "--from-history", "--trust-source"))
    assert "nothing was run" in line
    assert not marker.exists()


def test_from_history_still_runs_the_plain_recorded_source(guarded: tuple[dict[str, str], Path, int]) -> None:
    where, script, launch = guarded
    script.write_text(GUARDED.replace("x * 2.0", "x * 3.0") + "\nCHANGED = 1\n")
    with History.open(**where) as h:
        r = replay_launch(h, launch, from_history=True, trust_source=True)
    assert r.outcome == "match", r.message
    assert r.message.startswith("recorded source; ")


def test_file_changed_outside_the_kernel_is_refused_unless_allowed(
    guarded: tuple[dict[str, str], Path, int],
) -> None:
    where, script, launch = guarded
    script.write_text(GUARDED + "\nSOMETHING_ELSE = 1\n")
    line = one_line_error(_cli(where, "replay", launch))
    assert f"file changed: {script} hashes to" in line and "--allow-changed" in line
    with History.open(**where) as h:
        r = replay_launch(h, launch, allow_changed=True)
    assert r.outcome == "match", r.message
    assert r.file_changed and not r.source_changed
    assert r.message.startswith(f"kernel file changed since the record ({script}); launch {launch}")


def test_launches_recorded_before_file_hashes_check_the_kernel_source_only(
    guarded: tuple[dict[str, str], Path, int],
) -> None:
    where, script, launch = guarded
    _edit(where, "UPDATE launches SET kernel_file_sha256 = NULL")
    script.write_text(GUARDED + "\nSOMETHING_ELSE = 1\n")
    with History.open(**where) as h:
        assert replay_launch(h, launch).outcome == "match"
        script.write_text(GUARDED.replace("x * 2.0", "x * 3.0"))
        r = replay_launch(h, launch)
    assert r.outcome == "error" and r.message.startswith("source changed: __main__.bump_kernel")


def test_recorded_file_hash_is_the_whole_file(guarded: tuple[dict[str, str], Path, int]) -> None:
    where, script, launch = guarded
    with sqlite3.connect(where["db"]) as conn:
        (recorded,) = conn.execute(
            "SELECT kernel_file_sha256 FROM launches WHERE id = ?", (launch,)
        ).fetchone()
    conn.close()
    assert recorded == hashlib.sha256(script.read_bytes()).hexdigest()


# -- item 5: scripts without a __main__ guard ----------------------------------------------------------------

UNGUARDED = '''"""A script that launches at top level, with a side effect, and no __main__ guard."""
import torch
import triton
import triton.language as tl

BLOCK = 32
SCALE: tl.constexpr = tl.constexpr(2.0)
{payload}

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * SCALE, mask=mask)


x = torch.arange(100, dtype=torch.float32)
out = torch.empty(100)
scale_kernel[(triton.cdiv(100, BLOCK),)](x, out, 100, BLOCK=BLOCK)
print("launched")
'''


def test_script_without_main_guard_replays_without_running_its_statements(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    text = UNGUARDED.format(payload=_payload(marker).rstrip("\n"))
    script = tmp_path / "script.py"
    script.write_text(text)
    where = _where(tmp_path)
    proc = run_cli("--db", where["db"], "--blobs", where["blobs"], "record", script)
    assert proc.returncode == 0 and proc.stdout == "launched\n", proc.stderr
    assert marker.read_text() == "ran\n"
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines, 1) if line.startswith("with open("))
    x_line = next(i for i, line in enumerate(lines, 1) if line.startswith("x = torch"))
    proc = run_cli("--db", where["db"], "--blobs", where["blobs"], "replay", "--last")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 replayed: 1 match" in proc.stdout and "launched" not in proc.stdout
    assert marker.read_text() == "ran\n"  # the side effect did not happen again
    with History.open(**where) as h:
        r = replay_launch(h, 1)
    assert r.outcome == "match", r.message
    # Only what the kernel needs ran: triton, tl and SCALE. Not the docstring and ``import torch`` (1-2),
    # ``BLOCK = 32`` (6: the kernel's BLOCK is its parameter), the side effect, nor the launch code.
    assert r.skipped == (
        f"skipped 8 top-level statements of script.py (lines 1-2, 6, {first}-{first + 1}, {x_line}-{x_line + 3})"
    )
    assert marker.read_text() == "ran\n"
