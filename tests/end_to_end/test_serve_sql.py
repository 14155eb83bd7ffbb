"""``tilelens serve``'s SQL box (issue 48, point 10): ``/sql`` shows a read-only statement's rows as a table
(at most ``PAGE_ROWS``), ``/sql.csv`` downloads them all as CSV with formula-like text quoted; a statement the
read-only gate refuses is a 400 with its one-line error, on SQLite and PostgreSQL alike; and in Chromium,
typing a query and pressing Run shows the table."""

from __future__ import annotations

import html
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

from tests import heatmap_kernels as hk
from tests.conftest import BACKENDS
from tests.end_to_end.conftest import one_line_error, tilelens_in_process
from tests.end_to_end.test_serve_browser import Page, browser, server  # noqa: F401 - fixtures, shared
from tests.heatmap_history import HOSTILE_TAG, HeatmapHistory, on_postgres, record_history
from tilelens.config import resolve_location
from tilelens.store.read.query import NO_STATEMENT
from tilelens.web import sqlbox
from tilelens.web.app import create_app

ROWS = "SELECT id, grid_x, oob_lanes, status FROM launches ORDER BY id"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> HeatmapHistory:
    return record_history(tmp_path_factory.mktemp("serve-sql"))


@pytest.fixture(scope="module")
def hist(recorded: HeatmapHistory) -> HeatmapHistory:
    return recorded  # the browser fixture `server` of test_serve_browser serves this one


@pytest.fixture(scope="module", params=BACKENDS)
def any_hist(
    request: pytest.FixtureRequest, recorded: HeatmapHistory, tmp_path_factory: pytest.TempPathFactory
) -> HeatmapHistory:
    if request.param == "sqlite":
        return recorded
    pg = request.getfixturevalue("postgres_server")
    url = pg.url(pg.create_database("serve_sql"))
    return on_postgres(recorded, url, tmp_path_factory.mktemp("serve-sql-postgresql") / "blobs")


@pytest.fixture(scope="module")
def client(any_hist: HeatmapHistory) -> TestClient:
    location = resolve_location(str(any_hist.db), any_hist.blobs, env={})
    return TestClient(create_app(location), base_url="http://127.0.0.1:8765")


def sql(client: TestClient, query: str, csv: bool = False) -> tuple[int, str, dict[str, str]]:
    r = client.get("/sql.csv" if csv else "/sql", params={"q": query})
    return r.status_code, r.text, dict(r.headers)


def test_rows_are_shown_as_a_table(client: TestClient, any_hist: HeatmapHistory) -> None:
    status, text, _ = sql(client, ROWS)
    assert status == 200
    ids = any_hist.ids
    rows = "".join(
        f'<tr><td class="n">{i}</td><td class="n">{g}</td><td class="n">{o}</td><td>ok</td></tr>'
        for i, g, o in zip(ids, [3, 2, 2, 3, 1, 3], [0, 12, 0, 0, 0, 0])
    )
    table = f"<table><tr><th>id</th><th>grid_x</th><th>oob_lanes</th><th>status</th></tr>{rows}</table>"
    assert f'<div id="sql-result">{table}</div>' in text
    assert '<p id="sql-count">6 rows · ' in text
    assert f'<a href="/sql.csv?{html.escape(urlencode({"q": ROWS}))}" download>CSV</a>' in text
    assert f">{html.escape(ROWS)}</textarea>" in text  # the box keeps the query
    # strings from the history are escaped, and a browser's CRLF comes back as LF
    status, text, _ = sql(client, "SELECT qualname FROM kernels\r\nWHERE qualname LIKE '%script%'")
    assert status == 200 and f"<td>{html.escape(hk.HOSTILE_NAME)}</td>" in text
    assert hk.HOSTILE_NAME not in text and ">SELECT qualname FROM kernels\nWHERE" in text


def test_the_page_shows_at_most_page_rows(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlbox, "PAGE_ROWS", 2)
    status, text, _ = sql(client, ROWS)
    assert status == 200 and '<p id="sql-count">first 2 rows (the CSV has them all) · ' in text
    assert text.count('<tr><td class="n">') == 2
    status, csv, _ = sql(client, ROWS, csv=True)
    assert status == 200 and csv.count("\r\n") == 1 + 6


def test_the_csv_download_is_exact_and_formulas_stay_text(
    client: TestClient, any_hist: HeatmapHistory
) -> None:
    query = (
        "SELECT id, tag, '=1+2' AS f, '-3' AS t, -3 AS n, '@x' AS a, 'a,\"b\"' AS q, NULL AS z, "
        "'+1' AS \"=head\" FROM runs ORDER BY id"
    )
    r = client.get("/sql.csv", params={"q": query})
    first, second = any_hist.runs
    assert r.status_code == 200
    assert r.headers["content-disposition"] == 'attachment; filename="tilelens-query.csv"'
    assert r.headers["content-type"] == "text/csv; charset=utf-8"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.content == (
        b"id,tag,f,t,n,a,q,z,'=head\r\n"
        + f'{first},,\'=1+2,\'-3,-3,\'@x,"a,""b""",,\'+1\r\n'.encode()
        + f'{second},{HOSTILE_TAG},\'=1+2,\'-3,-3,\'@x,"a,""b""",,\'+1\r\n'.encode()
    )
    # every row, whatever the page shows
    assert client.get("/sql.csv", params={"q": ROWS}).content.count(b"\r\n") == 1 + 6
    # the page says what the CSV does to such text
    assert html.escape(sqlbox.CSV_NOTE) in sql(client, ROWS)[1]


@pytest.mark.parametrize(
    "query",
    [
        "DELETE FROM runs",
        "UPDATE launches SET status = 'error'",
        "DROP TABLE kernels",
        "CREATE TABLE t (x INTEGER)",
        "SELECT 1; DELETE FROM runs",
    ],
)
def test_a_write_is_refused_with_400_and_its_one_line_error(
    client: TestClient, any_hist: HeatmapHistory, query: str
) -> None:
    before = sql(client, ROWS, csv=True)[1]
    status, text, _ = sql(client, query)
    assert status == 400
    cli = one_line_error(tilelens_in_process("--db", any_hist.db, "--blobs", any_hist.blobs, "sql", query))
    message = cli.removeprefix("tilelens: error: ")
    assert f'<p class="bad" id="sql-error">{html.escape(message)}</p>' in text
    assert "\n" not in message
    assert sql(client, query, csv=True)[0] == 400
    assert sql(client, ROWS, csv=True)[1] == before  # nothing changed


def test_bad_input_is_400_and_a_foreign_host_is_refused(client: TestClient) -> None:
    status, text, _ = sql(client, "-- only a comment")
    assert status == 400 and f'id="sql-error">{NO_STATEMENT}<' in text
    assert sql(client, "", csv=True)[0] == 400
    status, text, _ = sql(client, "SELECT 1 " + " " * sqlbox.MAX_QUERY_CHARS)
    assert status == 400 and "the SQL box takes up to 10,000" in text
    status, text, _ = sql(client, "SELECT * FROM no_such_table")
    assert status == 400 and "no_such_table" in text
    empty = client.get("/sql")
    assert empty.status_code == 200 and "<textarea" in empty.text and "sql-result" not in empty.text
    assert 'href="/sql">sql</a>' in client.get("/").text  # every page links the box
    for path in ("/sql", "/sql.csv"):
        r = client.get(path, params={"q": ROWS}, headers={"Host": "evil.example.com"})
        assert r.status_code == 400 and "grid_x" not in r.text


def test_a_runaway_query_ends_with_the_request_timeout(any_hist: HeatmapHistory) -> None:
    location = resolve_location(str(any_hist.db), any_hist.blobs, env={})
    client = TestClient(create_app(location, request_timeout=1), base_url="http://127.0.0.1:8765")
    forever = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    for csv in (False, True):
        status, text, _ = sql(client, forever, csv=csv)
        # Whichever stops it first, the query's own timeout or the request's: 503 and the time it ran past.
        ended = (
            "the request took longer than 1 s and was abandoned",
            "query stopped: it ran past its 1 s timeout",
        )
        assert status == 503 and any(message in text for message in ended), text


def test_a_csv_past_its_cap_is_refused() -> None:
    assert sqlbox.csv_text(["x"], [("=a",), (b"\x01",)]) == "x\r\n'=a\r\n01\r\n"
    with pytest.raises(ValueError, match="the result is over 10 characters as CSV"):
        sqlbox.csv_text(["x"], [("a" * 11,)], max_chars=10)


def test_chromium_runs_a_typed_query(browser: object, server: str, hist: HeatmapHistory) -> None:  # noqa: F811
    p = Page(browser, server)
    p.goto("/")
    p.follow("a[href='/sql']")
    assert p.page.title() == "sql · TileLens"
    p.page.fill("textarea[name=q]", "SELECT id, grid_x FROM launches\nWHERE oob_lanes > 0")
    p.follow("button[type=submit]")
    assert p.page.inner_text("#sql-count").startswith("1 row")
    cells = p.page.locator("#sql-result td").all_inner_texts()
    assert cells == [str(hist.ids[1]), "2"]
    assert p.page.input_value("textarea[name=q]") == "SELECT id, grid_x FROM launches\nWHERE oob_lanes > 0"
    with p.page.expect_download() as download:
        p.page.click("a:text('CSV')")
    path = download.value.path()
    with open(path, "rb") as f:
        assert f.read() == f"id,grid_x\r\n{hist.ids[1]},2\r\n".encode()
    p.page.fill("textarea[name=q]", "DELETE FROM runs")
    p.page.click("button[type=submit]")
    p.page.wait_for_selector("#sql-error")
    assert p.page.inner_text("#sql-error").startswith("refused DELETE")
    p.errors = [e for e in p.errors if "400" not in e]  # the browser logs the 400 itself
    p.close()
