"""The ASGI application of ``tilelens serve``: routes over a history opened read-only, one reader per request.

Each request opens the history the way ``tilelens sql`` does (:func:`tilelens.api.open_query`: SQLite with
``mode=ro`` and a read-only authorizer, PostgreSQL in read-only transactions) and closes it before answering,
so the app never holds a lock or a connection between requests and never writes a byte. Handlers are plain
functions (starlette runs them in its thread pool); "not found" is a 404 page or JSON ``{"error": ...}``,
a bad filter is a 400.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from tilelens import api
from tilelens.errors import KernelNotFoundError, LaunchNotFoundError, NoTraceError, UsageError
from tilelens.web import pages

if TYPE_CHECKING:
    from tilelens.api import HistoryQuery
    from tilelens.config import Location

# The web page draws at most this many cells per argument: larger tensors are binned (tilelens.store.heatmaps).
WEB_MAX_CELLS = 1 << 16
LIST_LIMIT = 500
SECURITY_HEADERS = {
    # Only this app's own script and styles; nothing from elsewhere, nothing inline but the style sheet.
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def create_app(location: Location) -> Starlette:
    """The app serving the history at ``location`` (read-only)."""

    def query() -> HistoryQuery:
        return api.open_query(location=location)

    def html(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)

    def guarded(
        handler: Callable[[Request], Response], as_json: bool = False
    ) -> Callable[[Request], Response]:
        def run(request: Request) -> Response:
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

        return run

    def runs(request: Request) -> Response:
        with query() as q:
            return html(pages.runs_page(q.runs(limit=LIST_LIMIT)))

    def launches(request: Request) -> Response:
        params = request.query_params
        filters = {k: params[k] for k in pages.FILTERS if params.get(k)}
        oob = params.get("oob") in ("1", "true", "on")
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

    def heatmaps_json(request: Request) -> Response:
        width = request.query_params.get("width")
        if width is not None and not width.isdigit():
            raise UsageError(f"width is a positive number of elements, not {width!r}")
        with query() as q:
            maps = api.launch_heatmaps(
                q,
                request.path_params["launch_id"],
                width=int(width) if width else None,
                max_cells=WEB_MAX_CELLS,
            )
        return JSONResponse(_heatmap_json(maps))

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
        Route("/static/heatmap.js", script),
    ]

    async def missing(request: Request, exc: Exception) -> Response:
        return html(pages.not_found(f"no page {request.url.path}"), 404)

    return Starlette(routes=routes, exception_handlers={404: missing})


def _heatmap_json(maps: Any) -> dict[str, Any]:
    """The heatmap data plus, per argument, each cell's colour index in either mode (palette included)."""
    from tilelens.reporters.palette import cell_colors, color_table

    out: dict[str, Any] = maps.as_dict()
    out["colors"] = color_table()
    for h, d in zip(maps.heatmaps, out["heatmaps"]):
        d["color"] = {
            mode: cell_colors(h, mode).ravel().astype(int).tolist() for mode in ("access", "program")
        }
    return out


def _jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))
