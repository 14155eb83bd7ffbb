"""``show --heatmap x.png`` without matplotlib: the launch as ``show`` prints it, then one line naming the
extra, exit 2 (as ``serve`` without its extra)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import store_helpers
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tilelens.store import History


@pytest.fixture
def where(tmp_path: Path) -> list[object]:
    with History.open(str(tmp_path / "h.db"), tmp_path / "blobs") as h:
        h.write_launch(h.begin_run(store_helpers.run_info()), store_helpers.launch())
    return ["--db", tmp_path / "h.db", "--blobs", tmp_path / "blobs"]


def _without_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every matplotlib module unimportable, as in an environment without the heatmap extra."""
    for name in [n for n in sys.modules if n == "matplotlib" or n.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)


def test_png_heatmap_without_matplotlib_shows_the_launch_then_names_the_extra(
    where: list[object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tilelens_in_process(*where, "show", "1")
    assert plain.returncode == 0 and "launch 1  tests.kernels.add_kernel" in plain.stdout
    _without_matplotlib(monkeypatch)
    png = tmp_path / "x.png"
    result = tilelens_in_process(*where, "show", "1", "--heatmap", png)
    assert result.stdout == plain.stdout  # the whole of `show`'s output, before the error
    assert one_line_error(result) == (
        f"tilelens: error: {png} not written: PNG heatmaps need matplotlib "
        "(pip install 'tilelens[heatmap]'; or write .svg, which needs nothing)"
    )
    assert not png.exists()
    json = tilelens_in_process(*where, "show", "1", "--json", "--heatmap", png)
    assert json.stdout.startswith("{") and json.returncode == 2 and "tilelens[heatmap]" in json.stderr


def test_svg_heatmap_needs_no_matplotlib(
    where: list[object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without_matplotlib(monkeypatch)
    result = tilelens_in_process(*where, "show", "1", "--heatmap", tmp_path / "x.svg")
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"heatmap written to {tmp_path / 'x.svg'}\n"
    assert (tmp_path / "x.svg").read_text().startswith("<svg")
