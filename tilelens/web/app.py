"""The ASGI application of ``tilelens serve``: routes over a history opened read-only, one reader per request.

Each request opens the history the way ``tilelens sql`` does (:func:`tilelens.api.open_query`: SQLite with
``mode=ro`` and a read-only authorizer, PostgreSQL in read-only transactions) and closes it before answering,
so the app never holds a lock or a connection between requests and never writes a byte. "Not found" is a
404 page or JSON ``{"error": ...}``, a bad filter or parameter is a 400. The SQL box (``/sql``, ``/sql.csv``:
:mod:`tilelens.web.sqlbox`) runs its statement through ``tilelens sql``'s read-only gate; one the database
refuses is a 400 showing the one-line error.

A request whose ``Host`` header names no host the server answers to (``localhost``, ``127.0.0.1``, ``::1``,
the ``--host`` it is bound to, and each ``--allowed-host``) is refused with 400 before any handler runs
(starlette's ``TrustedHostMiddleware``): a DNS-rebinding page in the user's browser cannot read the history.

Each handler runs in a daemon thread of its own and is waited for at most ``request_timeout`` seconds: past
that the client gets a 503, and the thread, which nothing can stop from outside, is left to finish on its
own. So a slow request never holds up the others, nor the server's shutdown (the process exits without
waiting for such threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from tilelens import api
from tilelens.errors import (
    KernelNotFoundError,
    LaunchNotFoundError,
    NoTraceError,
    QueryTimeoutError,
    TileLensError,
    UsageError,
)
from tilelens.web import pages, sqlbox

if TYPE_CHECKING:
    from tilelens.api import HistoryQuery
    from tilelens.config import Location

# The web page draws at most this many cells per argument: larger tensors are binned (tilelens.store.read.heatmaps).
WEB_MAX_CELLS = 1 << 16
NOUNS = {"width": " of elements", "start": " of events", "limit": " of events"}
EVENTS_PER_PAGE = 200  # the stepper's page of events (tilelens.store.read.heatmap_events bounds its cells)
LIST_LIMIT = 500
MAX_WIDTH = 1 << 31  # a heatmap row of more elements than this is no tensor's
REQUEST_TIMEOUT_S = 30.0
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
_FLAGS = {"": False, "0": False, "false": False, "off": False, "1": True, "true": True, "on": True}
SECURITY_HEADERS = {
    # Only this app's own script and styles; nothing from elsewhere, nothing inline but the style sheet.
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def host_patterns(hosts: Sequence[str]) -> list[str]:
    """``Host`` header values (without the port) for host names and IP addresses; IPv6 ones in brackets."""
    out: list[str] = []
    for host in hosts:
        host = host.strip().lower()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        out.append(f"[{host}]" if ":" in host else host)
    return list(dict.fromkeys(out))


def create_app(
    location: Location,
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
    request_timeout: float = REQUEST_TIMEOUT_S,
) -> Starlette:
    """The app serving the history at ``location`` (read-only), to requests whose ``Host`` is one of
    ``allowed_hosts`` (names or addresses, no port), each answered within ``request_timeout`` seconds."""

    def query() -> HistoryQuery:
        return api.open_query(location=location)

    def html(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)

    def guarded(handler: Callable[[Request], Response], as_json: bool = False) -> Callable[[Request], Any]:
        def answer(request: Request) -> Response:
            try:
                return handler(request)
            except (LaunchNotFoundError, KernelNotFoundError, NoTraceError) as exc:
                if as_json:
                    return JSONResponse({"error": str(exc)}, status_code=404)
                return html(pages.not_found(str(exc)), 404)
            except UsageError as exc:
                if as_json:
                    return JSONResponse({"error": str(exc)}, status_code=400)
                return html(pages.error_page("bad request", str(exc)), 400)

        async def run(request: Request) -> Response:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[Response] = loop.create_future()

            def settle(outcome: Response | BaseException) -> None:
                if done.done():
                    return
                if isinstance(outcome, BaseException):
                    done.set_exception(outcome)
                else:
                    done.set_result(outcome)

            def work() -> None:
                outcome: Response | BaseException
                try:
                    outcome = answer(request)
                except BaseException as exc:  # noqa: BLE001 - handed to the event loop, raised there
                    outcome = exc
                with contextlib.suppress(RuntimeError):  # the loop is gone: the server stopped meanwhile
                    loop.call_soon_threadsafe(settle, outcome)

            threading.Thread(target=work, name="tilelens-serve-request", daemon=True).start()
            try:
                return await asyncio.wait_for(asyncio.shield(done), request_timeout)
            except asyncio.TimeoutError:
                message = f"the request took longer than {request_timeout:g} s and was abandoned"
                if as_json:
                    return JSONResponse({"error": message}, status_code=503)
                return html(pages.error_page("request timed out", message), 503)

        return run

    def runs(request: Request) -> Response:
        with query() as q:
            return html(pages.runs_page(q.runs(limit=LIST_LIMIT)))

    def launches(request: Request) -> Response:
        params = request.query_params
        filters = {k: params[k] for k in pages.FILTERS if params.get(k)}
        oob_text = params.get("oob", "")
        if oob_text.lower() not in _FLAGS:
            raise UsageError(f"oob is 1, true, on, 0, false or off, not {oob_text!r}")
        oob = _FLAGS[oob_text.lower()]
        run = request.path_params.get("run_id")
        with query() as q:
            if run is not None and not q.runs(run=run, limit=1):
                return html(pages.not_found(f"no run {run} in history {q.reader.label}"), 404)
            found = q.launches(run=run, oob=oob, limit=LIST_LIMIT, **filters)
        title = f"launches of run {run}" if run is not None else "launches"
        return html(pages.launches_page(title, found, filters, oob))

    def launch(request: Request) -> Response:
        with query() as q:
            detail = q.launch(request.path_params["launch_id"], oob_events=50, source=True)
        return html(pages.launch_page(detail))

    def kernel(request: Request) -> Response:
        kernel_id = request.path_params["kernel_id"]
        with query() as q:
            versions = api.kernel_versions(q, kernel_id)
        return html(pages.kernel_page(versions, kernel_id))

    def launch_json(request: Request) -> Response:
        with query() as q:
            return JSONResponse(_jsonable(q.launch(request.path_params["launch_id"]).as_dict()))

    def number(request: Request, name: str, default: int | None, low: int, high: int) -> int | None:
        text = request.query_params.get(name)
        if text is None:
            return default
        if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
            raise UsageError(
                f"{name} is a number{NOUNS.get(name, '')} from {low} to {high}, not {text[:40]!r}"
            )
        return int(text)

    def heatmaps_json(request: Request) -> Response:
        width = number(request, "width", None, 1, MAX_WIDTH)
        with query() as q:
            maps = api.launch_heatmaps(
                q, request.path_params["launch_id"], width=width, max_cells=WEB_MAX_CELLS
            )
        return JSONResponse(_heatmap_json(maps))

    def events_json(request: Request) -> Response:
        """One page of events (at most ``limit``, and a bounded number of cells), the heatmaps' cells each lit."""
        width = number(request, "width", None, 1, MAX_WIDTH)
        start = number(request, "start", 0, 0, MAX_WIDTH) or 0
        limit = number(request, "limit", EVENTS_PER_PAGE, 1, EVENTS_PER_PAGE) or EVENTS_PER_PAGE
        with query() as q:
            page = api.launch_events(
                q,
                request.path_params["launch_id"],
                start=start,
                limit=limit,
                width=width,
                max_cells=WEB_MAX_CELLS,
            )
        return JSONResponse(page)

    def program_json(request: Request) -> Response:
        width = number(request, "width", None, 1, MAX_WIDTH)
        with query() as q:
            found = api.program_cells(
                q,
                request.path_params["launch_id"],
                request.path_params["program"],
                width=width,
                max_cells=WEB_MAX_CELLS,
            )
        return JSONResponse(found)

    def sql_answer(request: Request, as_csv: bool) -> Response:
        """The SQL box, or its CSV; a statement the database refuses is its one-line error, status 400."""
        text = sqlbox.query_text(request.query_params.get("q", ""))
        if not text.strip() and not as_csv:
            return html(pages.page("sql", sqlbox.sql_body(text)))
        with query() as q:
            try:
                with q.sql_stream(text, timeout=request_timeout) as rows:
                    if as_csv:
                        body = sqlbox.csv_text(rows.columns, rows)
                    else:
                        first = list(itertools.islice(rows, sqlbox.PAGE_ROWS + 1))
            except TileLensError as exc:  # a query past the request's time is 503, as any request past it
                status = 503 if isinstance(exc, QueryTimeoutError) else 400
                return html(pages.page("sql", sqlbox.sql_body(text, error=str(exc))), status)
        if as_csv:
            disposition = {"Content-Disposition": 'attachment; filename="tilelens-query.csv"'}
            return Response(
                body, media_type="text/csv; charset=utf-8", headers={**SECURITY_HEADERS, **disposition}
            )
        more = len(first) > sqlbox.PAGE_ROWS
        return html(pages.page("sql", sqlbox.sql_body(text, rows.columns, first[: sqlbox.PAGE_ROWS], more)))

    def script(request: Request) -> Response:
        text = resources.files("tilelens.web").joinpath("static/heatmap.js").read_text(encoding="utf-8")
        return Response(text, media_type="text/javascript", headers=SECURITY_HEADERS)

    routes = [
        Route("/", guarded(runs)),
        Route("/runs/{run_id:int}", guarded(launches)),
        Route("/launches", guarded(launches)),
        Route("/launches/{launch_id:int}", guarded(launch)),
        Route("/kernels/{kernel_id:int}", guarded(kernel)),
        Route("/api/launches/{launch_id:int}", guarded(launch_json, as_json=True)),
        Route("/api/launches/{launch_id:int}/heatmaps", guarded(heatmaps_json, as_json=True)),
        Route("/api/launches/{launch_id:int}/events", guarded(events_json, as_json=True)),
        Route("/api/launches/{launch_id:int}/programs/{program:int}", guarded(program_json, as_json=True)),
        Route("/static/heatmap.js", script),
        Route("/sql", guarded(lambda request: sql_answer(request, as_csv=False))),
        Route("/sql.csv", guarded(lambda request: sql_answer(request, as_csv=True))),
    ]
    hosts = Middleware(TrustedHostMiddleware, allowed_hosts=host_patterns(allowed_hosts), www_redirect=False)

    async def missing(request: Request, exc: Exception) -> Response:
        return html(pages.not_found(f"no page {request.url.path}"), 404)

    return Starlette(routes=routes, exception_handlers={404: missing}, middleware=[hosts])


def _heatmap_json(maps: Any) -> dict[str, Any]:
    """The heatmap data plus, per argument, each cell's colour index in every mode, and each mode's legend."""
    from tilelens.reporters.palette import MODES, cell_colors, color_table, legend

    out: dict[str, Any] = maps.as_dict()
    out["colors"] = color_table()
    top = max((int(h.peak.max(initial=0)) for h in maps.heatmaps), default=0)
    out["legend"] = {mode: [list(item) for item in legend(mode, top)] for mode in MODES}
    for h, d in zip(maps.heatmaps, out["heatmaps"]):
        d["color"] = {mode: cell_colors(h, mode).ravel().astype(int).tolist() for mode in MODES}
    return out


def _jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))
