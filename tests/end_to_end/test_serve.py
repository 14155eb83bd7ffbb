"""``tilelens serve``'s web app through starlette's TestClient: every page and endpoint, 404s, filters,
escaping of hostile names, and that serving never writes to the history."""

from __future__ import annotations

import hashlib
import html
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests import heatmap_kernels as hk
from tests.conftest import BACKENDS
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tests.heatmap_history import HOSTILE_TAG, HeatmapHistory, on_postgres, record_history
from tilelens.config import resolve_location
from tilelens.reporters.palette import CATEGORY_COLORS
from tilelens.store.read.heatmaps import OOB, WRITE
from tilelens.web.app import create_app


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> HeatmapHistory:
    return record_history(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module", params=BACKENDS)
def hist(
    request: pytest.FixtureRequest, recorded: HeatmapHistory, tmp_path_factory: pytest.TempPathFactory
) -> HeatmapHistory:
    """The recorded history on each backend (PostgreSQL: a copy, as tests/end_to_end/conftest.py makes)."""
    if request.param == "sqlite":
        return recorded
    server = request.getfixturevalue("postgres_server")
    url = server.url(server.create_database("serve"))
    return on_postgres(recorded, url, tmp_path_factory.mktemp("serve-postgresql") / "blobs")


@pytest.fixture(scope="module")
def client(hist: HeatmapHistory) -> TestClient:
    return TestClient(
        create_app(resolve_location(str(hist.db), hist.blobs, env={})), base_url="http://127.0.0.1:8765"
    )


def launch_links(text: str) -> list[int]:
    import re

    return [int(m) for m in re.findall(r'<a href="/launches/(\d+)">', text)]


def test_runs_page_links_every_run_and_escapes_tags(client: TestClient, hist: HeatmapHistory) -> None:
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    for run in hist.runs:
        assert f'<a href="/runs/{run}">{run}</a>' in r.text
    assert HOSTILE_TAG not in r.text and html.escape(HOSTILE_TAG) in r.text
    assert "default-src 'self'" in r.headers["content-security-policy"]


def test_launches_of_a_run_with_the_filters_of_ls(client: TestClient, hist: HeatmapHistory) -> None:
    ids, run = hist.ids, hist.runs[0]
    assert launch_links(client.get(f"/runs/{run}").text) == [ids[3], ids[2], ids[1], ids[0]]
    assert launch_links(client.get(f"/runs/{run}?kernel=every_third").text) == [ids[3], ids[0]]
    assert launch_links(client.get(f"/runs/{run}?oob=1").text) == [ids[1]]
    assert launch_links(client.get("/launches?kernel=*histogram").text) == [ids[2]]
    assert launch_links(
        client.get("/launches?tag=" + HOSTILE_TAG.replace("<", "%3C").replace(">", "%3E")).text
    ) == [
        ids[5],
        ids[4],
    ]
    assert launch_links(client.get("/launches?status=ok&oob=1").text) == [ids[1]]
    bad = client.get("/launches?status=exploded")
    assert bad.status_code == 400 and "launch status must be one of" in bad.text
    missing = client.get("/runs/9999")
    assert missing.status_code == 404 and "no run 9999" in missing.text


def test_launch_page_has_source_counts_arguments_oob_events_and_heatmaps(
    client: TestClient, hist: HeatmapHistory
) -> None:
    r = client.get(f"/launches/{hist.ids[1]}")
    assert r.status_code == 200
    lines = Path(hk.__file__).read_text().splitlines()
    store = next(i for i, t in enumerate(lines, 1) if "tl.store(y_ptr + offs, v)" in t)
    load = next(i for i, t in enumerate(lines, 1) if "v = tl.load(x_ptr + offs, mask=offs < n" in t)
    # per-line active lanes: 20 loaded (lanes 20..31 are masked off), 32 stored (12 of them out of bounds)
    assert f'<tr class="hot" id="line-{load}"><td class="n">{load}</td><td class="n">20</td>' in r.text
    assert (
        f'<tr class="oob" id="line-{store}"><td class="n">{store}</td><td class="n"></td><td class="n">32</td>'
        in r.text
    )
    assert "<td>BLOCK=16</td>" in r.text and "<td>(2, 1, 1)</td>" in r.text
    assert "<td>0 loads, 2 stores, 0 atomics, 12 oob lanes</td>" in r.text
    assert (
        "<h2>out-of-bounds events (first 1 of 1)</h2>" in r.text
        and "<td>12 of 16</td><td>20..31</td>" in r.text
    )
    assert f'<div id="heatmaps" data-launch="{hist.ids[1]}">' in r.text
    assert '<script src="/static/heatmap.js"></script>' in r.text
    js = client.get("/static/heatmap.js")
    assert (
        js.status_code == 200
        and "getContext" in js.text
        and js.headers["content-type"].startswith("text/javascript")
    )


def test_heatmap_json_feeds_the_page(client: TestClient, hist: HeatmapHistory) -> None:
    data = client.get(f"/api/launches/{hist.ids[1]}/heatmaps").json()
    assert (
        data["grid"] == [2, 1, 1] and data["kinds"] == ["load", "store", "atomic"] and data["trace"] is True
    )
    y = data["heatmaps"][1]
    assert (y["name"], y["rows"], y["cols"], y["band_rows"]) == ("y_ptr", 3, 8, 1)
    assert y["writes"] == [1] * 20 + [0] * 12 and y["oob"] == [0] * 20 + [1] * 12
    assert y["program"] == [0] * 16 + [1] * 16
    colors = data["colors"]
    assert colors[y["color"]["access"][0]] == CATEGORY_COLORS[WRITE]
    assert colors[y["color"]["access"][20]] == CATEGORY_COLORS[OOB]
    narrow = client.get(f"/api/launches/{hist.ids[1]}/heatmaps?width=5").json()["heatmaps"][1]
    assert (narrow["cols"], narrow["oob_outside"]) == (5, 2)
    assert client.get(f"/api/launches/{hist.ids[1]}/heatmaps?width=x").status_code == 400
    detail = client.get(f"/api/launches/{hist.ids[1]}").json()
    assert detail["id"] == hist.ids[1] and detail["oob_lanes"] == 12


def test_events_come_in_bounded_pages_with_the_cells_they_touched(
    client: TestClient, hist: HeatmapHistory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tilelens.store.read import heatmap_events

    lines = Path(hk.__file__).read_text().splitlines()
    store = next(i for i, t in enumerate(lines, 1) if "tl.store(y_ptr + offs, v)" in t)
    load = next(i for i, t in enumerate(lines, 1) if "v = tl.load(x_ptr + offs, mask=offs < n" in t)
    base = f"/api/launches/{hist.ids[1]}/events"
    page = client.get(base).json()
    assert (page["count"], page["start"], page["next"], page["grid"]) == (4, 0, None, [2, 1, 1])
    summary = [
        (e["index"], e["pid"], e["op"], e["arg"], e["line"], e["lanes"], e["active"], e["oob"])
        for e in page["events"]
    ]
    assert summary == [
        (0, [0, 0, 0], "load", 0, load, 16, 16, 0),
        (1, [0, 0, 0], "store", 1, store, 16, 16, 0),
        (2, [1, 0, 0], "load", 0, load, 16, 4, 0),
        (3, [1, 0, 0], "store", 1, store, 16, 16, 12),
    ]
    # cells in the heatmaps' own numbering: y's 20 elements in rows of 8, then the band the 12 lanes reached
    assert page["events"][2]["cells"] == [16, 17, 18, 19]  # lanes 20..31 masked off: nothing touched
    assert page["events"][3]["cells"] == list(range(16, 32))
    one = client.get(base + "?start=1&limit=1").json()
    assert [e["index"] for e in one["events"]] == [1] and one["next"] == 2
    assert client.get(base + "?start=9").json()["events"] == []
    monkeypatch.setattr(heatmap_events, "MAX_CELLS", 20)  # 16 cells each: a page stops before the second
    bounded = client.get(base).json()
    assert [e["index"] for e in bounded["events"]] == [0] and bounded["next"] == 1
    for bad in ("limit=0", "limit=201", "start=-1", "start=x"):
        r = client.get(f"{base}?{bad}")
        assert r.status_code == 400 and " is a number of events from " in r.json()["error"], bad


def test_a_program_lights_the_cells_it_touched(client: TestClient, hist: HeatmapHistory) -> None:
    found = client.get(f"/api/launches/{hist.ids[1]}/programs/1").json()
    assert (found["program"], found["pid"], found["events"], len(found["lines"])) == (1, [1, 0, 0], 2, 2)
    cells = {h["position"]: h["cells"] for h in found["heatmaps"]}
    assert cells == {0: [16, 17, 18, 19], 1: list(range(16, 32))}
    r = client.get(f"/api/launches/{hist.ids[1]}/programs/2")
    assert r.status_code == 400 and r.json()["error"] == f"launch {hist.ids[1]} has programs 0 to 1, not 2"
    assert client.get("/api/launches/999/programs/0").status_code == 404


def test_not_found(client: TestClient) -> None:
    for url in (
        "/launches/999",
        "/kernels/999",
        "/launches/99999999999999999999",
        "/nowhere",
        "/launches/abc",
        "/runs/-1",
    ):
        r = client.get(url)
        assert r.status_code == 404, url
        assert r.headers["content-type"].startswith("text/html")
    r = client.get("/api/launches/999/heatmaps")
    assert (
        r.status_code == 404
        and r.json() == {"error": r.json()["error"]}
        and "no launch 999" in r.json()["error"]
    )
    assert client.post("/launches/1").status_code == 405


def test_a_hostile_kernel_name_stays_text_everywhere(client: TestClient, hist: HeatmapHistory) -> None:
    escaped = html.escape(hk.HOSTILE_NAME)
    page = client.get(f"/launches/{hist.ids[4]}").text
    kernel_id = int(page.split('<a href="/kernels/')[1].split('"')[0])
    for url in (f"/launches/{hist.ids[4]}", f"/runs/{hist.runs[1]}", f"/kernels/{kernel_id}", "/launches"):
        text = client.get(url).text
        assert "<script>window" not in text and "<img src=x" not in text, url
        assert escaped in text, url
    assert client.get(f"/api/launches/{hist.ids[4]}/heatmaps").json()["heatmaps"][0]["name"] == "x_ptr"


def test_kernel_page_across_versions(client: TestClient, hist: HeatmapHistory) -> None:
    page = client.get(f"/launches/{hist.ids[0]}").text
    kernel_id = int(page.split('<a href="/kernels/')[1].split('"')[0])
    text = client.get(f"/kernels/{kernel_id}").text
    assert "<h1>kernel tests.heatmap_kernels.every_third</h1>" in text
    assert text.count("<h2>version ") == 2 and "tl.load(x_ptr + 3 * i, mask=mask) + 2.0" in text
    # version 1: launches 1 and 4, the last is 4; version 2: launch 6
    assert f'<a href="/launches/{hist.ids[3]}">{hist.ids[3]}</a>' in text
    assert f'<a href="/launches/{hist.ids[5]}">{hist.ids[5]}</a>' in text
    assert '<a href="/launches?kernel=tests.heatmap_kernels.every_third">' in text


def test_serving_never_writes_to_the_history(hist: HeatmapHistory, client: TestClient) -> None:
    if not isinstance(hist.db, Path):
        pytest.skip("a file's bytes: SQLite (PostgreSQL reads run in read-only transactions, tests/unit)")
    before = hashlib.sha256(hist.db.read_bytes()).hexdigest()
    files = sorted(p.name for p in hist.db.parent.iterdir())
    for url in (
        "/",
        f"/runs/{hist.runs[0]}",
        f"/launches/{hist.ids[1]}",
        f"/api/launches/{hist.ids[0]}/heatmaps",
        "/launches",
    ):
        assert client.get(url).status_code == 200
    assert hashlib.sha256(hist.db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in hist.db.parent.iterdir()) == files


def test_serve_without_a_history_is_one_line(tmp_path: Path) -> None:
    res = tilelens_in_process("--db", tmp_path / "none.db", "serve", "--port", "0")
    assert one_line_error(res) == f"tilelens: error: no TileLens history at {tmp_path / 'none.db'}"


def test_the_serve_command_serves_until_interrupted(recorded: HeatmapHistory) -> None:
    import selectors
    import signal
    import subprocess
    import urllib.request

    from tests.end_to_end.conftest import default_signals, tilelens_argv

    argv = [
        *tilelens_argv(),
        "--db",
        str(recorded.db),
        "--blobs",
        str(recorded.blobs),
        "serve",
        "--port",
        "0",
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals
    )
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        assert sel.select(timeout=300), "no address printed"
        line = proc.stderr.readline()
        prefix = f"tilelens: serving {recorded.db} read-only at http://127.0.0.1:"
        assert line.startswith(prefix) and line.endswith("/ (Ctrl-C stops)\n"), line
        url = line[
            len("tilelens: serving ") + len(str(recorded.db)) + len(" read-only at ") : -len(
                " (Ctrl-C stops)\n"
            )
        ]
        with urllib.request.urlopen(url + f"launches/{recorded.ids[1]}") as r:  # the socket listens already
            assert r.status == 200 and b"unmasked_tail" in r.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # uvicorn shuts down, then hands the SIGINT back: the status of a program Ctrl-C ended, as `record`'s.
    assert proc.returncode == 130, err
    assert out == "" and err == "", err


def test_an_address_in_use_is_one_line(recorded: HeatmapHistory) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        res = tilelens_in_process("--db", recorded.db, "--blobs", recorded.blobs, "serve", "--port", port)
    assert (
        one_line_error(res) == f"tilelens: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
