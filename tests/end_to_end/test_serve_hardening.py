"""``tilelens serve`` answers only its own host names, refuses bad parameters with 400, and a slow request
holds up neither the other requests nor the server's shutdown (issue 47, points 2 and 4)."""

from __future__ import annotations

import selectors
import shutil
import signal
import sqlite3
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.end_to_end.conftest import default_signals, tilelens_argv
from tests.heatmap_history import HeatmapHistory, record_history
from tilelens.config import resolve_location
from tilelens.web.app import create_app


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> HeatmapHistory:
    return record_history(tmp_path_factory.mktemp("serve-hard"))


def _client(hist: HeatmapHistory, base: str, **kwargs: object) -> TestClient:
    app = create_app(resolve_location(str(hist.db), hist.blobs, env={}), **kwargs)  # type: ignore[arg-type]
    return TestClient(app, base_url=base)


@pytest.mark.parametrize(
    "host", ["evil.example.com", "127.0.0.1.evil.example.com", "localhost.", "testserver"]
)
@pytest.mark.parametrize("path", ["/", "/launches", "/api/launches/1", "/api/launches/1/heatmaps"])
def test_a_foreign_host_header_is_refused(recorded: HeatmapHistory, host: str, path: str) -> None:
    client = _client(recorded, "http://127.0.0.1:8765")
    r = client.get(path, headers={"Host": f"{host}:8765"})
    assert r.status_code == 400
    assert "runs" not in r.text and "launch" not in r.text.lower()


@pytest.mark.parametrize("host", ["localhost:8765", "127.0.0.1:8765", "[::1]:8765", "LOCALHOST", "127.0.0.1"])
def test_loopback_names_are_served(recorded: HeatmapHistory, host: str) -> None:
    r = _client(recorded, "http://127.0.0.1:8765").get("/", headers={"Host": host})
    assert r.status_code == 200


def test_allowed_hosts_extend_the_list(recorded: HeatmapHistory) -> None:
    client = _client(recorded, "http://127.0.0.1", allowed_hosts=["localhost", "box.lan"])
    assert client.get("/", headers={"Host": "box.lan:8765"}).status_code == 200
    assert client.get("/", headers={"Host": "127.0.0.1"}).status_code == 400  # not in this list


@pytest.mark.parametrize(
    "query",
    ["width=99999999999999999999", "width=0", "width=-3", "width=abc", "width=%C2%B2", f"width={2**31 + 1}"],
)
def test_a_bad_heatmap_width_is_400(recorded: HeatmapHistory, query: str) -> None:
    r = _client(recorded, "http://127.0.0.1").get(f"/api/launches/{recorded.ids[0]}/heatmaps?{query}")
    assert r.status_code == 400
    assert r.json()["error"].startswith("width is a number of elements from 1 to ")


@pytest.mark.parametrize("value", ["abc", "2", "yes please"])
def test_a_bad_oob_flag_is_400(recorded: HeatmapHistory, value: str) -> None:
    r = _client(recorded, "http://127.0.0.1").get("/launches", params={"oob": value})
    assert r.status_code == 400 and "oob is 1, true, on, 0, false or off" in r.text


@pytest.mark.parametrize("value", ["1", "true", "0", "off", ""])
def test_good_oob_flags_are_served(recorded: HeatmapHistory, value: str) -> None:
    assert _client(recorded, "http://127.0.0.1").get("/launches", params={"oob": value}).status_code == 200


def test_a_huge_wildcard_is_400_not_a_hang(recorded: HeatmapHistory) -> None:
    r = _client(recorded, "http://127.0.0.1").get("/launches", params={"kernel": "*" * 5000})
    assert r.status_code == 400 and "kernel name pattern is 5,000 characters long" in r.text
    # the matcher itself is linear: a long legal pattern of stars is answered at once
    r = _client(recorded, "http://127.0.0.1").get("/launches", params={"kernel": "*" * 500 + "x"})
    assert r.status_code == 200


# -- a request stuck on a lock ------------------------------------------------------------------------------


@pytest.fixture
def locked_copy(recorded: HeatmapHistory, tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    """A copy of the history in rollback-journal mode, and a connection to it: once it holds the EXCLUSIVE
    lock every reader waits (up to its 30 s busy timeout) until the lock is let go."""
    db = tmp_path / "h.db"
    src = sqlite3.connect(recorded.db)
    dst = sqlite3.connect(db)
    src.backup(dst)
    src.close()
    dst.execute("PRAGMA journal_mode = DELETE")
    dst.close()
    shutil.copytree(recorded.blobs, tmp_path / "blobs")
    holder = sqlite3.connect(db, isolation_level=None)
    yield db, holder
    holder.close()


def _start(db: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    argv = [*tilelens_argv(), "--db", str(db), "serve", "--port", "0", *extra]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals
    )
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)  # type: ignore[arg-type]
    assert sel.select(timeout=300), "no address printed"
    line = proc.stderr.readline()  # type: ignore[union-attr]
    url = line.split(" read-only at ", 1)[1].split(" (Ctrl-C stops)")[0]
    return proc, url


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=300) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_a_stuck_request_times_out_and_others_are_answered(
    locked_copy: tuple[Path, sqlite3.Connection],
) -> None:
    db, holder = locked_copy
    proc, url = _start(db, "--request-timeout", "2")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        # The lock is held for the whole test: this request cannot be answered from the history.
        stuck: list[tuple[int, bytes]] = []
        waiting = threading.Thread(target=lambda: stuck.append(_get(url + "launches")))
        waiting.start()
        assert _get(url + "static/heatmap.js")[0] == 200  # the server answers meanwhile
        waiting.join()
        assert stuck[0][0] == 503 and b"took longer than 2 s" in stuck[0][1]
        # A second stuck request is in flight while Ctrl-C comes: shutdown does not wait for it.
        second = threading.Thread(target=lambda: stuck.append(_get(url + "launches")), daemon=True)
        second.start()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
