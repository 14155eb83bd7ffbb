"""``tilelens serve`` in a real headless browser: Debian's chromium driven by playwright, against uvicorn
serving a recorded history on a free port of this machine.

Pages load without console errors or page errors, the heatmap canvases render the known pattern (pixels read
back at computed positions), hovering an element says what happened to it, the colouring switches, and a
hostile kernel name runs no script. Skips without chromium or playwright, except under ``CI=true``, where it
fails (CI installs chromium: .ci/run), as the PostgreSQL tests do.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import heatmap_kernels as hk
from tests.heatmap_history import HeatmapHistory, record_history
from tilelens.config import resolve_location
from tilelens.reporters.palette import CATEGORY_COLORS, COUNT_COLORS, PROGRAM_COLORS, rgb
from tilelens.store.read.heatmaps import OOB, READ, WRITE


def _missing() -> str | None:
    if shutil.which("chromium") is None:
        return "no chromium on PATH (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (the dev extra has it)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI must run the browser test: {reason}", pytrace=False)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    os.environ.setdefault(
        "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1"
    )  # the system chromium only, never a download
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=shutil.which("chromium"), args=["--no-sandbox", "--headless=new"]
        )
        yield b
        b.close()


@pytest.fixture(scope="module")
def hist(tmp_path_factory: pytest.TempPathFactory) -> HeatmapHistory:
    return record_history(tmp_path_factory.mktemp("browser"))


@pytest.fixture(scope="module")
def server(hist: HeatmapHistory) -> Iterator[str]:
    import uvicorn

    from tilelens.web.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(resolve_location(str(hist.db), hist.blobs, env={}))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    ready = threading.Event()
    for _ in range(600):  # up to a minute on a loaded machine; no assertion on how long it took
        if srv.started:
            ready.set()
            break
        ready.wait(0.1)
    assert srv.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=30)


class Page:
    """A browser page that collects console errors, page errors and every URL it requested."""

    def __init__(self, browser: object, base: str) -> None:
        self.page = browser.new_page()  # type: ignore[attr-defined]
        self.base = base
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def goto(self, path: str) -> None:
        response = self.page.goto(self.base + path)
        assert response is not None and response.status == 200, path

    def follow(self, selector: str) -> None:
        """Click a link or submit button and wait for the page it leads to to load (not just to start)."""
        with self.page.expect_navigation():
            self.page.click(selector)

    def canvas(self, name: str) -> dict:
        self.page.wait_for_selector("#heatmaps[data-ready='1']")
        return self.page.eval_on_selector(
            f"canvas[data-arg='{name}']",
            "c => { const b = c.getBoundingClientRect();"
            " return {x: b.left, y: b.top, cell: Number(c.dataset.cell), w: c.width, h: c.height}; }",
        )

    def pixel(self, name: str, row: int, col: int) -> tuple[int, int, int]:
        info = self.canvas(name)
        x, y = col * info["cell"] + info["cell"] // 2, row * info["cell"] + info["cell"] // 2
        data = self.page.eval_on_selector(
            f"canvas[data-arg='{name}']",
            f"c => Array.from(c.getContext('2d').getImageData({x}, {y}, 1, 1).data)",
        )
        return tuple(data[:3])

    def hover(self, name: str, row: int, col: int) -> str:
        cell = self.canvas(name)["cell"]
        # Locator.hover scrolls the canvas into view first; the position is relative to its top left.
        centre = {"x": col * cell + cell / 2, "y": row * cell + cell / 2}
        self.page.locator(f"canvas[data-arg='{name}']").hover(position=centre)
        self.page.wait_for_selector("#tip", state="visible")
        return self.page.inner_text("#tip")

    def close(self) -> None:
        self.page.close()
        assert self.errors == []
        assert all(url.startswith(self.base) for url in self.requests), self.requests


def test_pages_load_and_link_through(browser: object, server: str, hist: HeatmapHistory) -> None:
    p = Page(browser, server)
    p.goto("/")
    assert p.page.title() == "runs · TileLens"
    run = hist.runs[0]
    p.follow(f"a[href='/runs/{run}']")
    assert p.page.title() == f"launches of run {run} · TileLens"
    assert p.page.locator("table tr").count() == 1 + 4
    p.page.fill("input[name=kernel]", "every_third")
    p.follow("button[type=submit]")
    assert p.page.locator("table tr").count() == 1 + 2
    p.follow(f"a[href='/launches/{hist.ids[0]}']")
    assert p.page.title().startswith(f"launch {hist.ids[0]} ")
    p.follow("h1 + table a[href^='/kernels/']")
    assert p.page.title() == "kernel tests.heatmap_kernels.every_third · TileLens"
    assert p.page.locator("h2").count() == 2
    p.close()


def test_heatmaps_render_and_hover_says_what_happened(
    browser: object, server: str, hist: HeatmapHistory
) -> None:
    p = Page(browser, server)
    p.goto(f"/launches/{hist.ids[1]}")
    p.page.wait_for_selector("#heatmaps[data-ready='1']")  # the canvases are drawn from fetched JSON
    assert p.page.locator("canvas.heatmap").count() == 2
    p.page.select_option("#heatmap-by", "access")  # the page opens in "count" colouring
    info = p.canvas("y_ptr")
    assert (info["cell"], info["w"], info["h"]) == (24, 8 * 24, 4 * 24)
    assert p.pixel("x_ptr", 0, 0) == rgb(CATEGORY_COLORS[READ])
    assert p.pixel("y_ptr", 2, 3) == rgb(CATEGORY_COLORS[WRITE])  # element 19
    assert p.pixel("y_ptr", 2, 4) == rgb(CATEGORY_COLORS[OOB])  # first lane past the end
    lines = Path(hk.__file__).read_text().splitlines()
    store = next(i for i, t in enumerate(lines, 1) if "tl.store(y_ptr + offs, v)" in t)
    assert (
        p.hover("y_ptr", 2, 3)
        == f"y_ptr: element 19: writes 1; first program (1, 0, 0), store at line {store}"
    )
    assert (
        p.hover("y_ptr", 3, 7)
        == f"y_ptr: past the end +11: oob 1; first program (1, 0, 0), store at line {store}"
    )
    p.page.select_option("#heatmap-by", "program")
    assert p.pixel("y_ptr", 0, 0) == rgb(PROGRAM_COLORS[0])
    assert p.pixel("y_ptr", 2, 0) == rgb(PROGRAM_COLORS[1])
    assert p.pixel("y_ptr", 2, 4) == rgb(CATEGORY_COLORS[OOB])
    # a 2-D tensor: the hover names the element's row and column too
    p.goto(f"/launches/{hist.ids[0]}")
    third = next(i for i, t in enumerate(lines, 1) if "tl.store(y_ptr + 3 * i" in t)
    assert (
        p.hover("y_ptr", 3, 3)
        == f"y_ptr: element 21 [3, 3]: writes 1; first program (1, 0, 0), store at line {third}"
    )
    assert (
        p.hover("y_ptr", 4, 3)
        == f"y_ptr: past the end +3: masked 1; first program (2, 0, 0), store at line {third}"
    )
    cell = p.canvas("y_ptr")["cell"]
    p.page.locator("canvas[data-arg='y_ptr']").click(position={"x": 3 * cell + 2, "y": 3 * cell + 2})
    assert p.page.evaluate("location.hash") == f"#line-{third}"
    p.close()


def test_a_hostile_kernel_name_runs_no_script(browser: object, server: str, hist: HeatmapHistory) -> None:
    p = Page(browser, server)
    for path in (f"/launches/{hist.ids[4]}", f"/runs/{hist.runs[1]}", "/launches"):
        p.goto(path)
        assert p.page.evaluate("window.__pwned === undefined")
        assert p.page.locator("img").count() == 0
    p.goto(f"/launches/{hist.ids[4]}")
    assert hk.HOSTILE_NAME in p.page.inner_text("h1")
    p.canvas("x_ptr")  # the page's own script still ran
    p.close()


def _faded(color: str) -> tuple[int, int, int]:
    """A colour as heatmap.js draws a cell the selection left out: a quarter of it, three quarters white."""
    return tuple(round(v + (255 - v) * 0.75) for v in rgb(color))  # type: ignore[return-value]


def _line(text: str) -> int:
    lines = Path(hk.__file__).read_text().splitlines()
    return next(i for i, t in enumerate(lines, 1) if text in t)


def test_counts_legend_axes_and_the_red_out_of_bounds_line(
    browser: object, server: str, hist: HeatmapHistory
) -> None:
    p = Page(browser, server)
    p.goto(f"/launches/{hist.ids[1]}")
    assert p.page.input_value("#heatmap-by") == "count"
    assert p.pixel("y_ptr", 0, 0) == rgb(COUNT_COLORS[0])  # written once
    assert p.pixel("y_ptr", 2, 4) == rgb(CATEGORY_COLORS[OOB])
    legend = p.page.locator("#legend .item").all_inner_texts()
    assert legend == ["1 access", "masked off", "untouched", "out of bounds", "past the end"]
    panel = "#heatmaps .panel:nth-child(2)"
    assert p.page.locator(f"{panel} .row-tick").all_inner_texts() == ["0", "8", "16"]  # rows of 8 elements
    assert p.page.locator(f"{panel} .col-tick").all_inner_texts() == ["0", "2", "4", "6"]
    p.page.select_option("#heatmap-by", "access")
    assert p.page.locator("#legend .item").all_inner_texts()[:2] == ["read", "written"]
    store = _line("tl.store(y_ptr + offs, v)")
    row = f"tr#line-{store}"
    assert p.page.get_attribute(row, "class") == "oob"
    assert p.page.eval_on_selector(row, "r => getComputedStyle(r).backgroundColor") == "rgb(253, 226, 226)"
    marker = "r => getComputedStyle(r.firstElementChild, '::before').content"
    assert p.page.eval_on_selector(row, marker) == '"! "'
    load = f"tr#line-{_line('v = tl.load(x_ptr + offs, mask=offs < n')}"
    assert p.page.get_attribute(load, "class") == "hot"
    p.close()


def test_a_large_tensor_fits_and_zooms(browser: object, server: str, hist: HeatmapHistory) -> None:
    p = Page(browser, server)
    # y_ptr folded one element a row: 20 rows and 2 of band, cells of floor(320 / 22) pixels
    p.page.route("**/heatmaps", lambda route: route.continue_(url=route.request.url + "?width=1"))
    p.goto(f"/launches/{hist.ids[1]}")
    info = p.canvas("y_ptr")
    assert (info["cell"], info["w"], info["h"]) == (14, 14, 22 * 14)
    p.page.select_option("#heatmap-zoom", "4")
    info = p.canvas("y_ptr")
    assert (info["cell"], info["h"]) == (56, 22 * 56)
    scroll = p.page.eval_on_selector(
        "#heatmaps .panel:nth-child(2) .scroll", "s => s.clientHeight < s.scrollHeight"
    )
    assert scroll  # the zoomed panel scrolls inside the page
    p.close()


def test_a_program_and_each_event_light_what_they_touched(
    browser: object, server: str, hist: HeatmapHistory
) -> None:
    p = Page(browser, server)
    p.goto(f"/launches/{hist.ids[1]}")
    p.canvas("y_ptr")
    load, store = _line("v = tl.load(x_ptr + offs, mask=offs < n"), _line("tl.store(y_ptr + offs, v)")
    once = COUNT_COLORS[0]
    # program 1 on the grid view (2 x 1 programs): elements 16.. and the band are its, 0..15 fade
    cell = int(p.page.get_attribute("#programs", "data-cell") or 0)
    p.page.locator("#programs").click(position={"x": cell + cell / 2, "y": cell / 2})
    p.page.wait_for_selector("#heatmaps[data-program='1']")
    assert p.page.inner_text("#program-text") == "program (1, 0, 0): 2 events"
    assert p.pixel("y_ptr", 2, 0) == rgb(once) and p.pixel("y_ptr", 0, 0) == _faded(once)
    assert p.pixel("y_ptr", 3, 7) == rgb(CATEGORY_COLORS[OOB])
    assert p.page.locator(".src tr.sel").evaluate_all("rs => rs.map(r => r.id)") == [
        f"line-{load}",
        f"line-{store}",
    ]
    # stepping: the first event is program 0's load of x; y all fades
    p.page.click("#step-next")
    p.page.wait_for_selector("#heatmaps[data-event='0']")
    text = p.page.inner_text("#step-text")
    assert text.startswith(
        f"event 1 of 4: program (0, 0, 0) load x_ptr at line {load}, 16 of 16 lanes active: v = "
    )
    assert p.pixel("x_ptr", 0, 0) == rgb(once) and p.pixel("x_ptr", 2, 0) == _faded(once)
    assert p.pixel("y_ptr", 0, 0) == _faded(once)
    assert p.page.locator(".src tr.sel").evaluate_all("rs => rs.map(r => r.id)") == [f"line-{load}"]
    p.page.fill("#step", "3")  # the slider: the last event, program 1's store with 12 lanes past the end
    p.page.dispatch_event("#step", "input")
    p.page.wait_for_selector("#heatmaps[data-event='3']")
    assert p.page.inner_text("#step-text").startswith(
        f"event 4 of 4: program (1, 0, 0) store y_ptr at line {store}, 16 of 16 lanes active, 12 out of bounds"
    )
    assert p.pixel("y_ptr", 3, 7) == rgb(CATEGORY_COLORS[OOB]) and p.pixel("y_ptr", 1, 7) == _faded(once)
    p.page.click("#step-prev")
    p.page.wait_for_selector("#heatmaps[data-event='2']")
    p.page.click("#program-all")  # back to the whole launch
    assert p.pixel("y_ptr", 0, 0) == rgb(once) and p.page.locator(".src tr.sel").count() == 0
    p.close()
