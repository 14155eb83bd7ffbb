"""``tilelens report --html DIR``: a run as static HTML files (issue 48, point 10).

The report of the recorded examples holds the exact launch count and kernel names and the out-of-bounds event
with its source line, marked in the source; every link in the folder leads to a file (or an anchor) in it and
nothing is loaded from elsewhere; strings from the history are escaped; ``--run`` picks a run; ``--max-pages``
bounds the pages, problems first; a non-empty DIR is refused without ``--force``; and Chromium opens it from
disk without console errors.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from tests import heatmap_kernels as hk
from tests.end_to_end.conftest import EXAMPLES, Recorded, one_line_error, tilelens_in_process
from tests.end_to_end.test_serve_browser import Page, browser  # noqa: F401 - the fixture, shared
from tests.heatmap_history import HOSTILE_TAG, HeatmapHistory, record_history
from tilelens.reporters import report as report_module

REFERENCE = re.compile(r'\b(?:href|src|action)="([^"]*)"')


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> HeatmapHistory:
    return record_history(tmp_path_factory.mktemp("report"))


def report(hist: HeatmapHistory, *args: object) -> tuple[int, str, str]:
    out = tilelens_in_process("--db", hist.db, "--blobs", hist.blobs, "report", *args)
    return out.returncode, out.stdout, out.stderr


def check_links(folder: Path) -> int:
    """Every reference in every page leads to a file of ``folder`` or to an anchor of its own page."""
    count = 0
    for page in folder.glob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "<script" not in text and "http://" not in text.replace(
            'xmlns="http://www.w3.org/2000/svg"', ""
        )
        for ref in REFERENCE.findall(text):
            count += 1
            if ref == "data:,":  # the empty favicon, so that a browser asks for none
                continue
            target, _, anchor = html.unescape(ref).partition("#")
            assert "/" not in target and ":" not in target, (page.name, ref)
            file = folder / target if target else page
            assert file.is_file(), (page.name, ref)
            if anchor:
                assert f'id="{anchor}"' in file.read_text(encoding="utf-8"), (page.name, ref)
    return count


def test_the_report_of_the_examples_run(examples_history: Recorded, tmp_path: Path) -> None:
    rec = examples_history
    folder = tmp_path / "report"
    out = rec.main("report", "--html", folder)
    ((launches,),) = rec.rows(f"SELECT count(*) FROM launches WHERE run_id = {rec.run_id}")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        f"wrote {folder / 'index.html'}: run {rec.run_id}, {launches} launches, {launches} launch pages\n"
    )
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["index.html", *(f"launch-{i}.html" for ids in rec.ids.values() for i in ids)]
    )
    index = (folder / "index.html").read_text(encoding="utf-8")
    assert f"<title>report of run {rec.run_id} · TileLens</title>" in index
    assert f"<tr><td><b>launches</b></td><td>{launches}</td></tr>" in index
    assert f"{launches} of {launches} launches have a page of their own (at most 50" in index
    listed = re.findall(r'<tr><td class="n"><a href="launch-(\d+)\.html">\1</a></td>', index)
    assert [int(i) for i in listed] == sorted(i for ids in rec.ids.values() for i in ids)
    names = {f"{m}.{q}" for m, q in rec.rows("SELECT module, qualname FROM kernels")}
    assert names == {
        "vector_add.add_kernel",
        "softmax.softmax_kernel",
        "autotuned_matmul.matmul_kernel",
        "heuristics_scale.scale_kernel",
        "oob_bug.shift_kernel",
    }
    for name in names:
        assert f"<td>{name}</td>" in index
    # the out-of-bounds launch: its event links to its source line, which is marked
    (shift,) = rec.ids["shift_kernel"]
    assert f'<tr><td class="n"><a href="launch-{shift}.html">{shift}</a></td>' in index
    page = (folder / f"launch-{shift}.html").read_text(encoding="utf-8")
    line = next(
        i
        for i, t in enumerate((EXAMPLES / "oob_bug.py").read_text().splitlines(), 1)
        if "x = tl.load(x_ptr + offsets)" in t
    )
    assert "<h2>out-of-bounds events (first 1 of 1)</h2>" in page
    assert (
        f'<tr><td>(3, 0, 0)</td><td>load</td><td>x_ptr</td><td><a href="#line-{line}">{line}</a></td>'
        "<td>56 of 64</td><td>200..255</td>"
    ) in page
    assert f'<tr class="oob" id="line-{line}"><td class="n">{line}</td>' in page
    assert page.count("<td>out of bounds</td>") == 1
    assert page.count("<svg ") == 1 and 'data-arg="x_ptr"' in page and 'data-arg="out_ptr"' in page
    assert check_links(folder) > launches


def test_run_picks_the_run_and_hostile_strings_are_escaped(hist: HeatmapHistory, tmp_path: Path) -> None:
    first, second = hist.runs
    code, out, err = report(hist, "--html", tmp_path / "r2", "--run", second)
    assert (code, err) == (0, "")
    assert out == f"wrote {tmp_path / 'r2' / 'index.html'}: run {second}, 2 launches, 2 launch pages\n"
    index = (tmp_path / "r2" / "index.html").read_text(encoding="utf-8")
    assert f"<h1>report of run {second}</h1>" in index
    assert f"<tr><td><b>tag</b></td><td>{html.escape(HOSTILE_TAG)}</td></tr>" in index
    hostile = hist.ids[4]
    page = (tmp_path / "r2" / f"launch-{hostile}.html").read_text(encoding="utf-8")
    for text in (index, page):
        # the index's own "tag" label is the same markup as the hostile tag: only that one is markup
        assert text.count(HOSTILE_TAG) == text.count("<td><b>tag</b></td>") and hk.HOSTILE_NAME not in text
        assert html.escape(hk.HOSTILE_NAME) in text
        assert "<script" not in text and "<img" not in text
    assert f"(tag {html.escape(HOSTILE_TAG)})" in page
    check_links(tmp_path / "r2")
    # the default is the newest run; the first is another report
    code, out, _ = report(hist, "--html", tmp_path / "newest")
    assert code == 0 and out.startswith(f"wrote {tmp_path / 'newest' / 'index.html'}: run {second}, ")
    code, out, _ = report(hist, "--html", tmp_path / "r1", "--run", first)
    assert out == f"wrote {tmp_path / 'r1' / 'index.html'}: run {first}, 4 launches, 4 launch pages\n"
    assert sorted(p.name for p in (tmp_path / "r1").iterdir()) == sorted(
        ["index.html", *(f"launch-{i}.html" for i in hist.ids[:4])]
    )


def test_the_newest_replay_outcome_is_listed(hist: HeatmapHistory, tmp_path: Path) -> None:
    launch = hist.ids[2]  # the histogram
    replayed = tilelens_in_process("--db", hist.db, "--blobs", hist.blobs, "replay", launch)
    assert replayed.returncode == 0 and replayed.stdout.startswith(f"match: launch {launch} "), replayed
    assert report(hist, "--html", tmp_path / "r", "--run", hist.runs[0])[0] == 0
    index = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    row = index.split(f'<tr><td class="n"><a href="launch-{launch}.html">{launch}</a></td>', 1)[1]
    assert row.split("</tr>", 1)[0].endswith('<td><span class="">match</span></td>')
    assert index.count('<td><span class="">match</span></td>') == 1
    page = (tmp_path / "r" / f"launch-{launch}.html").read_text(encoding="utf-8")
    assert "<h2>replays</h2>" in page and "<td>interpreter on cpu</td><td>match</td>" in page


def test_max_pages_bounds_the_pages_problems_first(
    hist: HeatmapHistory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "one"
    code, out, _ = report(hist, "--html", folder, "--run", hist.runs[0], "--max-pages", "1", "--json")
    oob = hist.ids[1]  # the launch with out-of-bounds lanes
    assert code == 0 and f'"pages": [\n    {oob}\n  ]' in out
    assert sorted(p.name for p in folder.iterdir()) == ["index.html", f"launch-{oob}.html"]
    index = (folder / "index.html").read_text(encoding="utf-8")
    assert "1 of 4 launches have a page of their own (at most 1:" in index
    assert f'<td class="n">{hist.ids[0]}</td>' in index  # listed, without a link
    check_links(folder)
    # the index's table is bounded too, and says so
    monkeypatch.setattr(report_module, "INDEX_ROWS", 3)
    assert report(hist, "--html", tmp_path / "three", "--run", hist.runs[0])[0] == 0
    index = (tmp_path / "three" / "index.html").read_text(encoding="utf-8")
    assert "<p>The table lists the last 3 of the run's 4 launches.</p>" in index
    listed = re.findall(r'<tr><td class="n"><a href="launch-(\d+)\.html">', index)
    assert [int(i) for i in listed] == hist.ids[1:4]


def test_a_non_empty_folder_is_refused_without_force(
    hist: HeatmapHistory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "taken"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    out = tilelens_in_process("--db", hist.db, "--blobs", hist.blobs, "report", "--html", folder)
    assert (
        one_line_error(out)
        == f"tilelens: error: {folder} exists and is not an empty folder (--force replaces it)"
    )
    assert [p.name for p in folder.iterdir()] == ["keep.txt"]
    code, _, _ = report(hist, "--html", folder, "--force")
    assert code == 0 and not (folder / "keep.txt").exists() and (folder / "index.html").is_file()
    (tmp_path / "empty").mkdir()
    assert report(hist, "--html", tmp_path / "empty")[0] == 0
    # never the folder one stands in
    monkeypatch.chdir(folder)
    out = tilelens_in_process("--db", hist.db, "--blobs", hist.blobs, "report", "--html", ".", "--force")
    assert one_line_error(out) == (
        "tilelens: error: . holds the current directory: it is never replaced, even with --force"
    )
    assert (folder / "index.html").is_file()
    out = tilelens_in_process(
        "--db", hist.db, "--blobs", hist.blobs, "report", "--html", tmp_path / "x", "--run", 999
    )
    assert one_line_error(out) == f"tilelens: error: no run 999 in history {hist.db}"
    assert not (tmp_path / "x").exists()


def test_chromium_opens_the_report_from_disk(browser: object, hist: HeatmapHistory, tmp_path: Path) -> None:  # noqa: F811
    folder = tmp_path / "report"
    assert report(hist, "--html", folder, "--run", hist.runs[0])[0] == 0
    p = Page(browser, folder.resolve().as_uri())
    p.goto("/index.html")
    assert p.page.title() == f"report of run {hist.runs[0]} · TileLens"
    assert p.page.locator("table").nth(1).locator("tr").count() == 1 + 4
    oob = hist.ids[1]
    p.follow(f"a[href='launch-{oob}.html']")
    assert p.page.title().startswith(f"launch {oob} ")
    assert p.page.locator("svg g.heatmap").count() == 2  # xs and ys, drawn
    assert p.page.locator("svg rect[data-row]").count() > 0
    assert p.page.locator("tr.oob").count() == 1
    p.follow("a[href^='#line-']")
    assert p.page.evaluate("location.hash").startswith("#line-")
    p.follow("a[href='index.html']")
    assert p.page.title() == f"report of run {hist.runs[0]} · TileLens"
    p.close()
