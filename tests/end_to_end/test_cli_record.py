"""``tilelens record``: programs run as python runs them, with every launch recorded."""

from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

from tests.end_to_end.conftest import ROOT, Recorded, one_line_error, tilelens

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def inc_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


def inc(x):
    inc_kernel[(triton.cdiv(x.numel(), 64),)](x, x.numel(), BLOCK=64)
    return x
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def runs(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id, status, exit_code, argv, tag FROM runs ORDER BY id").fetchall()


def launch_count(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM launches").fetchone()[0]


def test_examples_recorded_with_output_passing_through(examples_recording: Recorded) -> None:
    proc = examples_recording.proc
    # The program's own stdout, untouched and nothing else; TileLens speaks on stderr.
    assert proc.stdout.splitlines() == [
        "vector_add: 1000 elements, max error 0.0",
        "softmax: (16, 100), rows sum to 1.000000",
        proc.stdout.splitlines()[2],
        "heuristics_scale: 2 sizes, one even and one ragged",
        "oob_bug: output looks right, but 56 lanes read past the end of x",
    ]
    assert proc.stdout.splitlines()[2].startswith("autotuned_matmul: (64, 48) @ (48, 40), config")
    err = proc.stderr
    assert (
        f"run {examples_recording.run_id}: 8 launches of 5 kernels, 0 errors, 56 out-of-bounds lanes" in err
    )
    for line in (
        "3  autotuned_matmul.matmul_kernel",
        "2  heuristics_scale.scale_kernel",
        "1  oob_bug.shift_kernel",
    ):
        assert line in err
    assert f"history: {examples_recording.db}" in err
    assert f"show {max(max(v) for v in examples_recording.ids.values())}" in err
    ((_, status, exit_code, argv, tag),) = runs(examples_recording.db)
    assert (status, exit_code, tag) == ("ok", 0, "examples")
    assert argv == f'["{ROOT / "examples" / "run_all.py"}", "--ignored"]'
    # --autotune all: both configs' trials, then the chosen launch.
    roles = examples_recording.rows(
        "SELECT role FROM launches l JOIN kernels k ON k.id = l.kernel_id "
        "WHERE k.qualname = 'matmul_kernel' ORDER BY l.id"
    )
    assert [r[0] for r in roles] == ["autotune-trial", "autotune-trial", "launch"]


def test_program_sees_what_python_gives_it_and_its_exit_status_is_ours(tmp_path: Path) -> None:
    write(tmp_path / "proj" / "kernels.py", KERNEL)
    script = write(
        tmp_path / "proj" / "main.py",
        """
        import os, sys
        import torch
        from kernels import inc  # the script's folder is sys.path[0]

        print("argv", sys.argv)
        print("name", __name__, "file", __file__)
        print("path0", sys.path[0])
        print("sum", float(inc(torch.zeros(100)).sum()))
        print("to stderr", file=sys.stderr)
        sys.exit(int(sys.argv[-1]))
        """,
    )
    db = tmp_path / "h.db"
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    proc = tilelens("record", "--db", db, "--tag", "t1", "../proj/main.py", "--tag", "x", "-m", "7", cwd=cwd)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout.splitlines() == [
        "argv ['../proj/main.py', '--tag', 'x', '-m', '7']",
        f"name __main__ file {script}",
        f"path0 {script.parent}",
        "sum 100.0",
    ]
    assert "to stderr\n" in proc.stderr
    assert "program exited with status 7; the run is marked failed" in proc.stderr
    (run,) = runs(db)
    assert run[1:3] == ("failed", 7) and run[4] == "t1"
    assert launch_count(db) == 1


def test_crash_prints_python_traceback_and_keeps_launches_up_to_it(tmp_path: Path) -> None:
    write(tmp_path / "kernels.py", KERNEL)
    script = write(
        tmp_path / "crash.py",
        """
        import torch
        from kernels import inc

        x = inc(torch.zeros(10))


        def broken():
            raise ValueError("kaboom")


        broken()
        inc(x)  # never reached
        """,
    )
    db = tmp_path / "h.db"
    proc = tilelens("--db", db, "record", script)
    assert proc.returncode == 1
    printed = proc.stderr.split("tilelens: run")[0]
    traceback = printed[printed.index("Traceback") :].strip().splitlines()
    # As python prints it: no TileLens or runpy frames, the script by its absolute path.
    assert traceback == [
        "Traceback (most recent call last):",
        f'  File "{script}", line 12, in <module>',
        "    broken()",
        f'  File "{script}", line 9, in broken',
        '    raise ValueError("kaboom")',
        "ValueError: kaboom",
    ]
    (run,) = runs(db)
    assert run[1:3] == ("failed", 1)
    assert launch_count(db) == 1


def test_keyboard_interrupt_marks_the_run_interrupted(tmp_path: Path) -> None:
    write(tmp_path / "kernels.py", KERNEL)
    script = write(
        tmp_path / "stop.py",
        """
        import torch
        from kernels import inc

        inc(torch.zeros(10))
        raise KeyboardInterrupt
        """,
    )
    db = tmp_path / "h.db"
    proc = tilelens("--db", db, "record", script)
    assert proc.returncode == 130
    assert "KeyboardInterrupt" in proc.stderr
    assert runs(db)[0][1:3] == ("interrupted", 130)
    assert launch_count(db) == 1


def test_pytest_as_a_module_records_the_kernels_under_test(tmp_path: Path) -> None:
    write(tmp_path / "kernels.py", KERNEL)
    write(
        tmp_path / "test_kernels.py",
        """
        import torch
        from kernels import inc


        def test_inc():
            assert float(inc(torch.zeros(100)).sum()) == 100


        def test_inc_again():
            assert float(inc(torch.ones(70)).sum()) == 140


        def test_wrong():
            assert float(inc(torch.zeros(5)).sum()) == 0
        """,
    )
    db = tmp_path / "h.db"
    proc = tilelens(
        "--db", db, "record", "--tag", "pytest", "-m", "pytest", "-q", "-p", "no:cacheprovider",
        "-p", "no:xdist", "test_kernels.py", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr  # pytest's status: one test failed
    assert "1 failed, 2 passed" in proc.stdout
    assert "3 launches of 1 kernel" in proc.stderr
    ((_, status, exit_code, argv, tag),) = runs(db)
    assert (status, exit_code, tag) == ("failed", 1, "pytest")
    assert argv.startswith('["-m", "pytest", "-q"')
    with sqlite3.connect(db) as conn:
        kernels = conn.execute("SELECT module, qualname FROM kernels").fetchall()
    assert kernels == [("kernels", "inc_kernel")]


def test_module_runs_from_the_working_directory(tmp_path: Path) -> None:
    write(tmp_path / "tool" / "__init__.py", "")
    write(
        tmp_path / "tool" / "__main__.py",
        """
        import sys
        print(sys.argv[1:], sys.path[0], __name__)
        """,
    )
    proc = tilelens("--db", tmp_path / "h.db", "record", "-m", "tool", "a", "--b", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"['a', '--b'] {tmp_path} __main__"
    assert "no Triton launches recorded" in proc.stderr


def test_missing_script_or_module_is_an_input_error_and_records_nothing(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    line = one_line_error(tilelens("--db", db, "record", tmp_path / "nope.py", "x"))
    assert f"can't open file '{tmp_path / 'nope.py'}'" in line
    line = one_line_error(tilelens("--db", db, "record", "-m", "no_such_module_here"))
    assert "No module named no_such_module_here" in line
    assert not db.exists()


def test_record_usage_errors(tmp_path: Path) -> None:
    proc = tilelens("--db", tmp_path / "h.db", "record", "--autotune", "sometimes", "x.py")
    assert "--autotune" in one_line_error(proc)
    proc = tilelens("--db", tmp_path / "h.db", "record", "--no-such-option", "x.py")
    assert "no-such-option" in one_line_error(proc)
    assert not (tmp_path / "h.db").exists()
