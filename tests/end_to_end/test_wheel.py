"""The built wheel works on its own: installed outside the repository, it records, lists, replays and migrates.

Editable installs and PYTHONPATH hide packaging mistakes (a wheel without its migrations once died in
``tilelens db upgrade``), so this test builds the wheel from a copy of the sources, installs it into a fresh
venv in a temp folder and runs the console script there, from a working directory outside the repository and
without PYTHONPATH, checking first that the package imported is the installed one.

The venv sees this interpreter's site-packages through a ``.pth`` path line (torch, Triton and the other
dependencies are not reinstalled). A path line adds the folder without processing the ``.pth`` files in it, so
an editable install of the checkout there stays inactive.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "setup.py", "README.md", "tilelens", "migrations"]  # what a build reads

SCRIPT = """
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


if __name__ == "__main__":  # replay loads this file to find the kernel: no launch at import
    x = torch.arange(100, dtype=torch.float32)
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(100, 64),)](x, out, 100, 3.0, BLOCK=64)
    assert torch.equal(out, x * 3.0)
    print("scaled", int(out.sum().item()))
"""


def _setuptools_builds_wheels() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    major, minor = (int(p) for p in setuptools.__version__.split(".")[:2])
    return (major, minor) >= (70, 1)


def build_wheel(tmp: Path) -> Path:
    """``pip wheel`` on a copy of the sources, so the build writes nothing into the checkout."""
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    # Offline when this interpreter can build the wheel itself; otherwise pip fetches setuptools.
    isolation = [] if _setuptools_builds_wheels() else ["--use-pep517"]
    no_isolation = ["--no-build-isolation"] if not isolation else []
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *no_isolation, "-w", tmp / "dist", src],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = (tmp / "dist").glob("tilelens-*.whl")
    return wheel


def make_venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    purelib = Path(
        subprocess.check_output(
            [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    ours.discard(str(purelib))
    (purelib / "_tilelens_test_deps.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    subprocess.run(
        [
            venv / "bin" / "python",
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--ignore-installed",
            wheel,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    # The child-process start-up hook is a top-level .pth that setup.py adds to every wheel.
    assert (purelib / "tilelens_startup.pth").is_file()
    return venv


def clean_env(venv: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "TILELENS_DB", "TILELENS_BLOBS", "VIRTUAL_ENV", "COLUMNS")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_wheel_installed_outside_the_checkout_records_lists_replays_and_migrates(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    venv = make_venv(tmp_path, wheel)
    work = tmp_path / "project"
    work.mkdir()
    env = clean_env(venv)

    def run(*argv: object, cwd: Path = work) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
        )

    # The installed package, not the checkout, and its migrations are real files inside it.
    probe = run(
        venv / "bin" / "python",
        "-c",
        "import tilelens, tilelens.store.sql.migrations as m; print(tilelens.__file__); print(m.migrations_dir())",
    )
    assert probe.returncode == 0, probe.stderr
    package_file, migrations = (Path(line) for line in probe.stdout.split())
    assert package_file.is_relative_to(venv) and not package_file.is_relative_to(ROOT)
    assert migrations == package_file.parent / "_migrations"
    assert not migrations.is_symlink()
    # The native accessor's source ships, so an installed TileLens builds it (tilelens/core/native/).
    native_source = package_file.parent / "core" / "native" / "accessor.cpp"
    assert native_source.read_bytes() == (ROOT / "tilelens" / "core" / "native" / "accessor.cpp").read_bytes()
    assert sorted(p.name for p in (migrations / "versions").glob("*.py")) == sorted(
        p.name for p in (ROOT / "migrations" / "versions").glob("*.py")
    )

    (work / "scale.py").write_text(SCRIPT)
    tilelens = venv / "bin" / "tilelens"
    rec = run(tilelens, "record", "scale.py")
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout == "scaled 14850\n"
    assert (work / ".tilelens" / "tilelens.db").is_file()

    ls = run(tilelens, "ls", "--json")
    assert ls.returncode == 0, ls.stderr
    (launch,) = json.loads(ls.stdout)
    assert (launch["qualname"], launch["grid"], launch["status"]) == ("scale_kernel", [2, 1, 1], "ok")
    assert launch["bytes_loaded"] == launch["bytes_stored"] == 400

    replay = run(tilelens, "replay", "--last")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "match" in replay.stdout

    completion = {"_TILELENS_COMPLETE": "complete_bash", "COMP_WORDS": "tilelens db u", "COMP_CWORD": "2"}
    completed = subprocess.run(
        [tilelens], cwd=work, env={**env, **completion}, capture_output=True, text=True
    )
    assert (completed.returncode, completed.stdout) == (0, "upgrade\n")

    fresh = tmp_path / "elsewhere" / "h.db"
    up = run(venv / "bin" / "python", "-m", "tilelens", "--db", fresh, "db", "upgrade", "--json")
    assert up.returncode == 0, up.stderr
    head = max(p.name.split("_")[0] for p in (ROOT / "migrations" / "versions").glob("[0-9]*.py"))
    assert json.loads(up.stdout)["from"] is None and json.loads(up.stdout)["to"] == head
    assert fresh.is_file()
