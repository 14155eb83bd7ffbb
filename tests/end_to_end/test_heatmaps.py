"""Heatmaps (``tilelens show --heatmap``, ``tilelens.api.launch_heatmaps``/``write_heatmaps``): the data step
checked cell by cell against kernels whose access patterns are known (tests/heatmap_history.py), then the
pictures: PNG pixels at computed positions, SVG structure, escaping, and matplotlib kept off other commands."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tests import heatmap_kernels as hk
from tests.end_to_end.conftest import ROOT, one_line_error, tilelens_in_process
from tests.heatmap_history import HeatmapHistory, record_history
from tilelens import api
from tilelens.reporters.palette import CATEGORY_COLORS, PROGRAM_COLORS, rgb
from tilelens.store.read.heatmaps import (
    ATOMIC,
    BAND,
    MASKED,
    OOB,
    READ,
    UNTOUCHED,
    WRITE,
    Heatmap,
    heatmaps_of,
)


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> HeatmapHistory:
    return record_history(tmp_path_factory.mktemp("heatmaps"))


def line_of(text: str) -> int:
    lines = Path(hk.__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def maps(hist: HeatmapHistory, launch: int, **kw: object) -> dict[str, Heatmap]:
    with api.open_query(str(hist.db), hist.blobs) as q:
        return {h.name: h for h in api.launch_heatmaps(q, hist.ids[launch], **kw).heatmaps}


def grid_of(values: dict[tuple[int, int], int], shape: tuple[int, int], fill: int = 0) -> np.ndarray:
    out = np.full(shape, fill, dtype=np.int64)
    for (r, c), v in values.items():
        out[r, c] = v
    return out


def test_every_third_of_a_2d_tensor_with_a_masked_tail(hist: HeatmapHistory) -> None:
    m = maps(hist, 0)
    assert list(m) == ["x_ptr", "y_ptr"]
    x, y = m["x_ptr"], m["y_ptr"]
    # 4 x 6 elements, then 2 band rows: the masked lanes at offsets 24, 27, 30, 33 land 0, 3, 6, 9 past the end.
    touched = {divmod(3 * i, 6): 1 for i in range(8)}
    band = {(4, 0): 1, (4, 3): 1, (5, 0): 1, (5, 3): 1}
    for h in (x, y):
        assert (h.rows, h.cols, h.band_rows, h.bin_rows, h.bin_cols) == (4, 6, 2, 1, 1)
        assert h.inside.tolist() == [[True] * 6] * 4 + [[False] * 6] * 2
        np.testing.assert_array_equal(h.masked, grid_of(band, (6, 6)))
        assert h.oob.sum() == h.atomics.sum() == 0 and (h.oob_outside, h.masked_outside, h.unmapped) == (
            0,
            0,
            0,
        )
        program = {divmod(3 * i, 6): i // 4 for i in range(8)} | {k: 2 for k in band}
        np.testing.assert_array_equal(h.program, grid_of(program, (6, 6), -1))
    np.testing.assert_array_equal(x.reads, grid_of(touched, (6, 6)))
    assert x.writes.sum() == 0 and y.reads.sum() == 0
    np.testing.assert_array_equal(y.writes, grid_of(touched, (6, 6)))
    load_line, store_line = line_of("v = tl.load(x_ptr + 3 * i"), line_of("tl.store(y_ptr + 3 * i")
    assert set(x.line[x.reads > 0].tolist()) == {load_line} and set(y.line[y.writes > 0].tolist()) == {
        store_line
    }
    assert set(y.kind[y.writes > 0].tolist()) == {1} and set(x.kind[x.reads > 0].tolist()) == {0}
    cat = y.categories()
    assert cat[0, 0] == WRITE and cat[0, 1] == UNTOUCHED and cat[4, 0] == MASKED and cat[4, 1] == BAND


def test_an_unmasked_tail_is_drawn_out_of_bounds_past_the_end(hist: HeatmapHistory) -> None:
    m = maps(hist, 1)
    xs, ys = m["x_ptr"], m["y_ptr"]
    # 20 elements folded into rows of 8 (the power of two above sqrt(20)): 3 rows, then band row 3.
    for h in (xs, ys):
        assert (h.rows, h.cols, h.band_rows, h.elements_per_row) == (3, 8, 1, 8)
        assert h.inside.ravel().tolist() == [True] * 20 + [False] * 12
        assert h.program.ravel().tolist() == [0] * 16 + [1] * 16
    assert xs.reads.ravel().tolist() == [1] * 20 + [0] * 12
    assert xs.masked.ravel().tolist() == [0] * 20 + [1] * 12 and xs.oob.sum() == 0
    assert ys.writes.ravel().tolist() == [1] * 20 + [0] * 12
    assert ys.oob.ravel().tolist() == [0] * 20 + [1] * 12 and ys.masked.sum() == 0
    assert ys.categories().ravel().tolist() == [WRITE] * 20 + [OOB] * 12
    # A narrower fold: rows of 5, the 12 out-of-bounds lanes fill band rows 4 and 5 and 2 lanes stay undrawn.
    narrow = maps(hist, 1, width=5)["y_ptr"]
    assert (narrow.rows, narrow.cols, narrow.band_rows) == (4, 5, 2)
    assert narrow.oob.sum() == 10 and narrow.oob_outside == 2


def test_atomics_and_masked_lanes_of_a_histogram(hist: HeatmapHistory) -> None:
    bins = maps(hist, 2)["bins_ptr"]
    assert (bins.rows, bins.cols, bins.band_rows) == (2, 2, 0)
    assert bins.atomics.ravel().tolist() == [1, 2, 0, 3]
    assert bins.masked.ravel().tolist() == [2, 0, 0, 0]
    assert bins.categories().ravel().tolist() == [ATOMIC, ATOMIC, UNTOUCHED, ATOMIC]
    assert bins.program.ravel().tolist() == [0, 0, -1, 0] and bins.kind.ravel().tolist() == [2, 2, -1, 2]


def test_a_transposed_view_is_drawn_in_logical_order(hist: HeatmapHistory) -> None:
    yt = maps(hist, 3)["y_ptr"]
    assert (yt.shape, yt.strides, yt.rows, yt.cols) == ([4, 6], [1, 4], 4, 6)
    # storage offset o of a (4, 6) view with strides (1, 4) is element (o % 4, o // 4)
    written = {(o % 4, o // 4): 1 for o in range(0, 24, 3)}
    np.testing.assert_array_equal(yt.writes[:4], grid_of(written, (4, 6)))
    assert yt.masked.sum() == 4 and yt.masked[:4].sum() == 0  # masked lanes still land past the end


def test_large_tensors_are_binned_into_whole_blocks_of_elements(hist: HeatmapHistory) -> None:
    with api.open_query(str(hist.db), hist.blobs) as q:
        trace = q.trace(hist.ids[0])
    from tilelens.store.read.heatmaps import TensorArg

    (x,) = heatmaps_of(trace, [TensorArg(0, "x_ptr", "float32", [4, 6], [6, 1])], (3, 1, 1), max_cells=4)
    assert (x.rows, x.cols, x.bin_rows, x.bin_cols) == (2, 2, 2, 3)
    assert x.reads[:2].tolist() == [[2, 2], [2, 2]]  # each 2 x 3 block holds columns 0 or 3 of two rows


def _pixel(image: np.ndarray, xy: tuple[int, int]) -> tuple[int, int, int]:
    px = image[xy[1], xy[0], :3]
    return (
        tuple(int(round(float(v) * 255)) for v in px) if px.dtype.kind == "f" else tuple(int(v) for v in px)
    )


def test_png_pixels_at_known_elements(hist: HeatmapHistory, tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    with api.open_query(str(hist.db), hist.blobs) as q:
        data = api.launch_heatmaps(q, hist.ids[1])
    out = tmp_path / "tail.png"
    lay = api.write_heatmaps(data, out, title="tail")
    image = mpimg.imread(out)
    assert image.shape[:2] == (lay.height, lay.width)
    xs, ys = lay.panels
    assert [p.heatmap.name for p in lay.panels] == ["x_ptr", "y_ptr"] and ys.cell == 24
    assert _pixel(image, xs.pixel(0, 0)) == rgb(CATEGORY_COLORS[READ])
    assert _pixel(image, xs.pixel(2, 4)) == rgb(CATEGORY_COLORS[MASKED])  # element 20: masked tail lane
    assert _pixel(image, ys.pixel(2, 3)) == rgb(CATEGORY_COLORS[WRITE])  # element 19
    assert _pixel(image, ys.pixel(2, 4)) == rgb(CATEGORY_COLORS[OOB])  # 0 past the end
    assert _pixel(image, ys.pixel(3, 7)) == rgb(CATEGORY_COLORS[OOB])  # 11 past the end
    # cell edges: the first and last pixel of a cell are still the cell's colour (no scaling, no smoothing)
    assert _pixel(image, (ys.x + 4 * 24 - 1, ys.y + 2 * 24)) == rgb(CATEGORY_COLORS[WRITE])
    assert _pixel(image, (ys.x + 4 * 24, ys.y + 3 * 24 - 1)) == rgb(CATEGORY_COLORS[OOB])

    by_program = api.write_heatmaps(data, tmp_path / "p.png", title="tail", by="program")
    image = mpimg.imread(tmp_path / "p.png")
    ys = by_program.panels[1]
    assert _pixel(image, ys.pixel(0, 0)) == rgb(PROGRAM_COLORS[0])
    assert _pixel(image, ys.pixel(2, 0)) == rgb(PROGRAM_COLORS[1])  # element 16: program 1
    assert _pixel(image, ys.pixel(3, 0)) == rgb(CATEGORY_COLORS[OOB])


def test_svg_has_one_rect_per_cell_with_what_it_holds(hist: HeatmapHistory, tmp_path: Path) -> None:
    with api.open_query(str(hist.db), hist.blobs) as q:
        data = api.launch_heatmaps(q, hist.ids[0])
    out = tmp_path / "third.svg"
    hostile = "k<script>alert(1)</script>&\x00\x1b"
    lay = api.write_heatmaps(data, out, title=hostile)
    root = ET.parse(out).getroot()  # well-formed despite the title's markup and control characters
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert root.find("s:text", ns).text == "k<script>alert(1)</script>&\\x00\\x1b"
    groups = root.findall("s:g", ns)
    assert [g.get("data-arg") for g in groups] == ["x_ptr", "y_ptr"]
    y_rects = groups[1].findall("s:rect", ns)
    assert len(y_rects) == 6 * 6
    cells = {(int(r.get("data-row")), int(r.get("data-col"))): r for r in y_rects}
    panel = lay.panels[1]
    r = cells[(0, 3)]
    assert (int(r.get("x")), int(r.get("y")), r.get("fill")) == (
        panel.x + 3 * 24,
        panel.y,
        CATEGORY_COLORS[WRITE],
    )
    store_line = line_of("tl.store(y_ptr + 3 * i")
    assert (
        r.find("s:title", ns).text
        == f"element 3 [0, 3]: writes 1; first program (0, 0, 0), store at line {store_line}"
    )
    assert (
        cells[(3, 3)]
        .find("s:title", ns)
        .text.startswith("element 21 [3, 3]: writes 1; first program (1, 0, 0)")
    )
    assert cells[(4, 3)].get("fill") == CATEGORY_COLORS[MASKED]
    assert cells[(4, 3)].find("s:title", ns).text.startswith("past the end +3: masked 1; first program (2")
    assert cells[(0, 1)].get("fill") == CATEGORY_COLORS[UNTOUCHED]
    assert cells[(5, 1)].get("fill") == CATEGORY_COLORS[BAND]
    assert len(root.findall("s:rect[@class='legend']", ns)) == len(lay.legend)


def test_show_heatmap_from_the_command_line(hist: HeatmapHistory, tmp_path: Path) -> None:
    out = tmp_path / "h.png"
    res = tilelens_in_process("--db", hist.db, "--blobs", hist.blobs, "show", hist.ids[1], "--heatmap", out)
    assert res.returncode == 0, res.stderr
    assert res.stderr == f"heatmap written to {out}\n" and "launch" in res.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for bad, message in (
        (["--heatmap", tmp_path / "h.jpg"], "a heatmap file ends in .png or .svg, not 'h.jpg'"),
        (
            ["--heatmap", out, "--heatmap-by", "colour"],
            "heatmap colouring must be one of access, count, program",
        ),
        (["--heatmap", tmp_path / "no" / "dir.svg"], "cannot write"),
    ):
        res = tilelens_in_process("--db", hist.db, "--blobs", hist.blobs, "show", hist.ids[1], *bad)
        assert message in one_line_error(res) and res.stdout == ""


def test_ls_and_show_never_import_matplotlib_or_the_web_stack(hist: HeatmapHistory) -> None:
    code = (
        "import sys\n"
        "from tilelens.cli import main\n"
        f"assert main(['--db', {str(hist.db)!r}, '--blobs', {str(hist.blobs)!r}, 'ls']) == 0\n"
        f"assert main(['--db', {str(hist.db)!r}, '--blobs', {str(hist.blobs)!r}, 'show', '2', '--source']) == 0\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'starlette', 'uvicorn', 'PIL'))\n"
        "assert not heavy, heavy\n"
        "print('clean')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("clean\n")


def test_every_active_lane_is_counted_once_as_show_counts_it(hist: HeatmapHistory) -> None:
    with api.open_query(str(hist.db), hist.blobs) as q:
        for launch_id in hist.ids:
            detail = q.launch(launch_id)
            data = api.launch_heatmaps(q, launch_id)
            access = {a.name: a.access for a in detail.args if a.access is not None}
            for h in data.heatmaps:
                drawn = h.reads.sum() + h.writes.sum() + h.atomics.sum() + h.oob.sum()
                assert drawn + h.oob_outside + h.unmapped == access[h.name].active_lanes, (launch_id, h.name)
                assert h.oob.sum() + h.oob_outside == access[h.name].oob_lanes
                assert (
                    h.reads.sum() <= access[h.name].load_lanes
                    and h.writes.sum() <= access[h.name].store_lanes
                )


def test_each_format_bins_at_its_own_size() -> None:
    assert (api.max_cells_for("a.png"), api.max_cells_for("a.SVG")) == (1 << 18, 1 << 14)


def test_count_colouring_shows_accesses_per_element(hist: HeatmapHistory) -> None:
    from tilelens.reporters.palette import COUNT_COLORS, cell_colors, color_table, legend

    bins = maps(hist, 2)["bins_ptr"]
    assert bins.peak.ravel().tolist() == [1, 2, 0, 3] and bins.peak_exact
    table = color_table()
    shown = [table[i] for i in cell_colors(bins, "count").ravel()]
    # 1, 2 and 3 atomics: buckets "1", "2", "3-4"; the untouched bin keeps its category colour
    assert shown == [COUNT_COLORS[0], COUNT_COLORS[1], CATEGORY_COLORS[UNTOUCHED], COUNT_COLORS[2]]
    assert [label for _, label in legend("count", 3)][:4] == [
        "1 access",
        "2 accesses",
        "3-4 accesses",
        "masked off",
    ]
    y = maps(hist, 1)["y_ptr"]  # out-of-bounds lanes stay red past the end in every mode
    assert table[cell_colors(y, "count")[2, 4]] == CATEGORY_COLORS[OOB]


def test_a_binned_cell_counts_its_busiest_element(
    hist: HeatmapHistory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tilelens.reporters.heatmap_layout import caption
    from tilelens.store.read import heatmaps
    from tilelens.store.read.heatmaps import TensorArg

    with api.open_query(str(hist.db), hist.blobs) as q:
        trace = q.trace(hist.ids[0])
    arg = [TensorArg(0, "x_ptr", "float32", [4, 6], [6, 1])]
    (x,) = heatmaps_of(trace, arg, (3, 1, 1), max_cells=4)
    # each 2 x 3 block holds two elements read once each: 2 reads, its busiest element read once
    assert x.reads[:2].tolist() == [[2, 2], [2, 2]] and x.peak[:2].tolist() == [[1, 1], [1, 1]]
    assert x.peak_exact and caption(x).endswith("one cell = 2x3 elements (counts: the busiest one's)")
    with api.open_query(str(hist.db), hist.blobs) as q:
        trace = q.trace(hist.ids[2])
    bins = [TensorArg(1, "bins_ptr", "int32", [4], [1])]  # atomics per bin 1, 2, 0, 3: one cell of all four
    (b,) = heatmaps_of(trace, bins, (2, 1, 1), max_cells=1)
    assert (b.bin_rows, b.bin_cols, b.atomics[0, 0], b.peak[0, 0], b.peak_exact) == (2, 2, 6, 3, True)
    monkeypatch.setattr(heatmaps, "DENSE_LIMIT", 3)  # past it: the cell's mean, rounded up (6 / 4 -> 2)
    (b,) = heatmaps_of(trace, bins, (2, 1, 1), max_cells=1)
    assert (b.peak[0, 0], b.peak_exact) == (2, False)
    assert caption(b).endswith("(counts: their mean, rounded up)")


def test_pictures_label_their_axes_with_element_indices(hist: HeatmapHistory, tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    from tilelens.reporters.heatmap_layout import AXIS, tick_step
    from tilelens.reporters.palette import COUNT_COLORS

    assert [tick_step(c, 40) for c in (1, 3, 8, 24, 40)] == [50, 20, 5, 2, 1]
    with api.open_query(str(hist.db), hist.blobs) as q:
        tail = api.launch_heatmaps(q, hist.ids[1])
        third = api.launch_heatmaps(q, hist.ids[0])
    lay = api.write_heatmaps(tail, tmp_path / "tail.png", by="count")
    ys = lay.panels[1]  # 20 elements in rows of 8: rows start at offsets 0, 8, 16
    assert ys.row_ticks == [(0, "0"), (1, "8"), (2, "16")] and ys.col_ticks == [
        (0, "0"),
        (2, "2"),
        (4, "4"),
        (6, "6"),
    ]
    assert [label for _, label in lay.legend][0] == "1 access"
    image = mpimg.imread(tmp_path / "tail.png")
    assert _pixel(image, ys.pixel(0, 0)) == rgb(COUNT_COLORS[0])
    margin = image[ys.y : ys.y + ys.cell, ys.x - AXIS : ys.x, :3]  # the row label "0" is ink on white
    assert (margin < 0.5).any() and (margin == 1.0).any()
    root = ET.parse(api.write_heatmaps(third, tmp_path / "t.svg") and tmp_path / "t.svg").getroot()
    ns = {"s": "http://www.w3.org/2000/svg"}
    y_group = root.findall("s:g", ns)[1]
    assert [t.text for t in y_group.findall("s:text[@class='row-tick']", ns)] == ["0", "1", "2", "3"]
    assert [t.text for t in y_group.findall("s:text[@class='col-tick']", ns)] == ["0", "2", "4"]
