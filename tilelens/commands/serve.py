"""``tilelens serve``: browse a history in a local web app (read-only; loopback unless told otherwise)."""

from __future__ import annotations

import socket

import typer

from tilelens import api
from tilelens.commands import render
from tilelens.commands.common import state
from tilelens.commands.escape import escape
from tilelens.errors import UsageError

HELP = (
    "Serve a read-only web app over the history: runs, their launches (filters as `ls`), each launch with "
    "its source, per-line lane counts, arguments, interactive heatmaps, out-of-bounds events and replays, "
    "and each kernel across its versions. Needs the `serve` extra (starlette, uvicorn).\n\n"
    "Examples:\n\n"
    "  tilelens serve\n\n"
    "  tilelens --db runs/nightly.db serve --port 9000\n"
)


def register(app: typer.Typer) -> None:
    app.command("serve", help=HELP)(serve)


def serve(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: loopback only)."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="TCP port (0: any free port)."),
    allowed_host: list[str] | None = typer.Option(  # noqa: B008 - typer reads the default
        None,
        "--allowed-host",
        metavar="NAME",
        help="Also answer requests whose Host header is NAME (repeatable; default: localhost, 127.0.0.1, ::1 "
        "and --host's name). Any other Host gets 400, so a web page cannot reach the history through DNS "
        "rebinding.",
    ),
    request_timeout: float = typer.Option(
        30.0,
        "--request-timeout",
        metavar="SECONDS",
        min=0.001,
        help="Answer 503 to a request slower than this.",
    ),
) -> None:
    try:
        import uvicorn

        from tilelens.web.app import LOOPBACK_HOSTS, create_app
    except ImportError as exc:
        raise UsageError(
            f"tilelens serve needs the serve extra (pip install 'tilelens[serve]'): {exc}"
        ) from exc
    location = state(ctx).location()
    with api.open_query(location=location) as q:  # a missing or unreadable history fails here, as one line
        label = q.reader.label
    sock = _listen(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    render.err().print(escape(f"tilelens: serving {label} read-only at http://{shown}:{bound}/ (Ctrl-C stops)"),
                       markup=False)  # fmt: skip
    hosts = [*LOOPBACK_HOSTS, *([] if host in ("0.0.0.0", "::", "") else [host]), *(allowed_host or [])]
    app = create_app(location, allowed_hosts=hosts, request_timeout=request_timeout)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        # Ctrl-C: requests in flight get this long (each is answered within request_timeout anyway)
        timeout_graceful_shutdown=max(1, int(request_timeout) + 1),
    )
    uvicorn.Server(config).run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (0: a free port), so that the address printed is the real one
    and an address in use is one line, exit 2, before anything is served."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock
