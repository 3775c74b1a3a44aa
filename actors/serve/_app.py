"""The ASGI application: one store, one registry, the routes, and the answers every
route shares (errors, health, metrics, the console's files)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException
from starlette.routing import Match, Route

from persistence import open_store
from protocol import TranscriptError
from protocol._checks import check_count, check_duration

from .. import SessionRegistry
from ..compaction import CompactionPolicy
from ..compressors import Compressor
from ._control import control_routes
from ._errors import ServiceError, error_body, status_of
from ._events import HEARTBEAT_S, EventHub
from ._ids import SessionIds
from ._limits import RequestLimits
from ._metrics import StatusCounter, render
from ._openapi import document
from ._recall import recall_routes
from ._service import Service
from ._sessions import session_routes
from ._tokens import Token, TokenFile

__all__ = ["ServeLimits", "build", "create_app"]

logger = logging.getLogger("session_actors.serve")

_CONSOLE = {
    "": ("index.html", "text/html"),
    "app.js": ("app.js", "text/javascript"),
    "app.css": ("app.css", "text/css"),
}
#: The console loads nothing from anywhere else, and nothing may frame it.
_CONSOLE_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}


@dataclass(frozen=True, slots=True)
class ServeLimits:
    """What bounds a client. ``max_body``: bytes of a request body (413 above);
    ``body_timeout_s``: the longest wait for a body's next chunk (408);
    ``header_timeout_s``: the longest a connection may take to send a request's
    headers (then it is closed); ``max_concurrency``: requests in flight at once
    (503 above); ``drain_s``: how long a shutdown lets open turns and calls finish;
    ``heartbeat_s``: how often an idle event stream gets a comment line."""

    max_body: int = 1 << 20
    body_timeout_s: float = 30.0
    header_timeout_s: float = 10.0
    max_concurrency: int = 1000
    drain_s: float = 10.0
    heartbeat_s: float = HEARTBEAT_S

    def __post_init__(self) -> None:
        check_count(self.max_body, "max_body", minimum=1)
        check_count(self.max_concurrency, "max_concurrency", minimum=1)
        for name in ("body_timeout_s", "header_timeout_s", "heartbeat_s"):
            check_duration(getattr(self, name), name)
        check_duration(self.drain_s, "drain_s", allow_zero=True)


def create_app(
    db: str,
    *,
    tokens: TokenFile | None,
    compressor: Compressor | None = None,
    policy: CompactionPolicy | None = None,
    limits: ServeLimits | None = None,
) -> Any:
    """The service on the database ``db`` (a path or URL, as ``open_store`` takes).
    ``tokens`` None serves every request as an admin: only for a loopback address
    (``session-actors serve --insecure-local``). The store and registry open now and
    close when the application shuts down (after draining, see `ServeLimits`)."""
    return build(db, tokens=tokens, compressor=compressor, policy=policy, limits=limits or ServeLimits())[0]


def build(
    db: str,
    *,
    tokens: TokenFile | None,
    compressor: Compressor | None,
    policy: CompactionPolicy | None,
    limits: ServeLimits,
) -> tuple[Any, Service]:
    """`create_app`'s application and the service behind it (`serve` drains it)."""
    store = open_store(db)
    hub = EventHub(lambda session_id: _source_of(store, session_id), heartbeat_s=limits.heartbeat_s)
    try:
        registry = _ServeRegistry(
            store, compressor=compressor, policy=policy, holder=serve_holder(), on_outcome=hub.publish
        )
    except BaseException:
        store.close()
        raise
    service = Service(store, registry, tokens, hub)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        hub.bind(asyncio.get_running_loop())
        try:
            yield
        finally:
            await asyncio.to_thread(_shut_down, service, limits.drain_s)

    app = FastAPI(
        title="session-actors",
        summary="Durable chat-agent transcripts over HTTP",
        docs_url=None,  # Swagger UI loads its assets from a CDN; /openapi.json is the schema
        redoc_url=None,
        lifespan=lifespan,
    )
    _answer_errors(app)
    _document(app)

    async def who(request: Request) -> Token:  # async: FastAPI runs a plain def on a worker thread
        return service.identify(request.headers.get("authorization"))

    app.include_router(session_routes(service, who))
    app.include_router(control_routes(service, who))
    app.include_router(recall_routes(service, who))
    limited = RequestLimits(
        app, max_body=limits.max_body, body_timeout_s=limits.body_timeout_s, max_in_flight=limits.max_concurrency
    )
    statuses = StatusCounter(SessionIds(limited))
    service.requests_in_flight = lambda: limited.in_flight
    _serve_health(app, service, statuses, who)
    _serve_console(app)
    return statuses, service


class _ServeRegistry(SessionRegistry):
    """A turn opened over HTTP is its client's: the holder is never announced, so on
    PostgreSQL (direct) no registry seals a killed server's turns before their lease
    lapses (see `serve_holder`)."""

    _announces_holder = False


def serve_holder() -> str:
    """The registry's holder name: ``serve:host:pid:random``, without the process mark
    a library registry's name ends with. A turn a client opened over HTTP is the
    client's, not the process's: when the server is killed, its turns stand for their
    lease (``lease_ttl_s``) so that the client can go on with them through the
    restarted server, instead of being sealed as a dead process's turns are."""
    return f"serve:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _document(app: FastAPI) -> None:
    """``/openapi.json``: FastAPI's paths with every body, answer and error (`_openapi`)."""
    generate = app.openapi
    cached: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        if not cached:
            cached.append(document(generate()))
        return cached[0]

    app.openapi = openapi  # type: ignore[method-assign]


def _shut_down(service: Service, drain_s: float) -> None:
    try:
        service.adopter.close()
        service.registry.close(drain_s=drain_s)
    finally:
        service.store.close()


def _source_of(store: Any, session_id: str) -> str | None:
    try:
        info = store.get_session(session_id)
    except TranscriptError:
        return None
    return None if info is None else info.source


def _answer_errors(app: FastAPI) -> None:
    async def answer(request: Request, exc: Exception) -> Response:
        return JSONResponse(error_body(exc), status_code=status_of(exc))

    async def invalid(request: Request, exc: Exception) -> Response:
        errors: list[Any] = getattr(exc, "errors", list)()
        where = ", ".join(".".join(str(p) for p in e.get("loc", ())) for e in errors) or "the request"
        return JSONResponse({"error": "InvalidRequest", "message": f"invalid {where}"}, status_code=422)

    async def http(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(status, "HTTPError")
        # a 405 names every method the path takes (each of FastAPI's routes has its own)
        headers = {"Allow": _allowed(app, request)} if status == 405 else getattr(exc, "headers", None)
        body = {"error": kind, "message": str(getattr(exc, "detail", kind))}
        return JSONResponse(body, status_code=status, headers=headers)

    app.add_exception_handler(TranscriptError, answer)
    app.add_exception_handler(ServiceError, answer)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http)
    app.add_exception_handler(Exception, answer)


def _allowed(app: FastAPI, request: Request) -> str:
    methods: set[str] = set()
    for route in app.router.routes:
        if isinstance(route, Route) and route.methods and route.matches(request.scope)[0] is not Match.NONE:
            methods |= route.methods
    return ", ".join(sorted(methods))


def _serve_health(app: FastAPI, service: Service, statuses: StatusCounter, who: Any) -> None:
    @app.get("/healthz", summary="The process answers")
    async def healthz() -> Any:
        return {"status": "ok"}

    @app.get("/readyz", summary="The store answers and the service is not shutting down")
    async def readyz() -> Any:
        if service.registry.stats()["draining"]:
            return JSONResponse({"status": "draining"}, status_code=503)
        try:
            await asyncio.to_thread(service.store.now)
        except TranscriptError as exc:
            return JSONResponse({"status": "store unavailable", "error": type(exc).__name__}, status_code=503)
        return {"status": "ready"}

    @app.get("/metrics", summary="Prometheus text format (admin scope: the counters of every source)")
    async def metrics(request: Request) -> Any:
        service.require(await who(request), "admin")
        return PlainTextResponse(render(service, statuses), media_type="text/plain; version=0.0.4")


def _serve_console(app: FastAPI) -> None:
    folder = resources.files(__package__).joinpath("console")
    files = {name: (folder.joinpath(file).read_bytes(), kind) for name, (file, kind) in _CONSOLE.items()}

    def page(name: str) -> Response:
        body, kind = files[name]
        return Response(body, media_type=kind, headers=_CONSOLE_HEADERS)

    for name in files:
        path = f"/console/{name}".rstrip("/")
        app.add_api_route(path, lambda name=name: page(name), methods=["GET"], include_in_schema=False)
