"""The HTTP server: one aiohttp application in the daemon's event loop.

Every answer comes from in-memory State and cached verdicts, so polling never waits on
ingest or Postgres (only incidents, mirrors and trends read the database). Auth, CORS and
TLS are applied here once for all routes.
"""

from __future__ import annotations

import asyncio
import hmac
import ssl
from typing import Any

from aiohttp import web

from lagd.http import burrow_v3, lagd_api, metrics, page, routing
from lagd.http.context import CTX, Handler, HttpContext, envelope
from lagd.runtime import logs
from lagd.runtime.turns import Turns

log = logs.get(__name__)

# Liveness and readiness stay open so probes work even when reads need a token.
_OPEN_PATHS = frozenset({"/burrow/admin", "/burrow/admin/ready"})


def _bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bearer token on mutating requests always, on reads when http.auth-reads is set."""
    if request.method == "OPTIONS" or request.match_info.http_exception is not None:
        # No route takes this method (405, with Allow) or this path (404): say so, whoever asks.
        return await handler(request)
    settings = request.app[CTX].settings.http
    token = settings.auth_token.reveal()
    mutating = request.method in ("POST", "DELETE", "PUT", "PATCH")
    if mutating and not token:
        return envelope(
            request,
            403,
            True,
            "changes through the API are disabled: set http.auth-token to allow them",
            {},
        )
    needs = mutating or (settings.auth_reads and request.path not in _OPEN_PATHS)
    if needs and not hmac.compare_digest(
        _bearer(request).encode(errors="surrogatepass"), token.encode(errors="surrogatepass")
    ):
        resp = envelope(request, 401, True, "missing or wrong bearer token: send 'Authorization: Bearer <token>'", {})
        resp.headers["WWW-Authenticate"] = 'Bearer realm="lagd"'
        return resp
    return await handler(request)


@web.middleware
async def cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Access-Control headers when http.cors-origin is set; answers preflights itself."""
    origin = request.app[CTX].settings.http.cors_origin
    if request.method == "OPTIONS" and origin:
        resp: web.StreamResponse = web.Response(status=204)
        resp.headers["Access-Control-Allow-Methods"] = "GET, POST, DELETE, OPTIONS"
        resp.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
        resp.headers["Access-Control-Max-Age"] = "600"
    else:
        try:
            resp = await handler(request)
        except web.HTTPException as exc:
            if not origin:
                raise
            exc.headers["Access-Control-Allow-Origin"] = origin
            raise
    if origin:
        resp.headers["Access-Control-Allow-Origin"] = origin
        resp.headers["Vary"] = "Origin"
    return resp


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown paths, wrong methods and handler bugs answer in the JSON envelope too."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return envelope(request, 404, True, "invalid request type: see /lagd/v1/openapi.json and /v3/kafka", {})
    except web.HTTPMethodNotAllowed as exc:
        allow = ", ".join(sorted(exc.allowed_methods))
        resp = envelope(request, 405, True, f"method {request.method} not allowed here: use {allow}", {})
        resp.headers["Allow"] = allow
        return resp
    except web.HTTPException:
        raise
    except Exception:
        log.exception("http handler failed", path=request.path, method=request.method)
        return envelope(request, 500, True, "internal error: see lagd's log for the traceback", {})


@web.middleware
async def timeout_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Reading a request's body and answering it take at most http.request-timeout.

    A client that sends its body slowly (or never) would otherwise hold the handler forever.
    """
    limit = request.app[CTX].settings.http.request_timeout
    try:
        async with asyncio.timeout(limit):
            return await handler(request)
    except TimeoutError:
        log.warning("request timed out", path=request.path[:200], method=request.method, timeout_s=limit)
        return envelope(
            request,
            503,
            True,
            f"the request was not read and answered within http.request-timeout ({limit:g} s): "
            "send the body at once, or try again later",
            {},
        )


def build_app(ctx: HttpContext) -> web.Application:
    """The application with every route: Burrow v3, /metrics, /lagd/v1 and the status page."""
    app = web.Application(
        middlewares=[timeout_middleware, cors_middleware, error_middleware, auth_middleware],
        client_max_size=ctx.settings.http.max_request_bytes,
    )
    app[CTX] = ctx
    routing.install(app)
    burrow_v3.add_routes(app)
    metrics.add_routes(app)
    lagd_api.add_routes(app)
    page.add_routes(app)
    return app


def _listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def _ssl_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


async def start_http(ctx: HttpContext) -> web.AppRunner:
    """Listen on http.listen (TLS when cert and key are set); stop with `stop_http`."""
    http = ctx.settings.http
    # keepalive_timeout closes a connection that has no complete request head this long after
    # it opened or after its last answer: idle keep-alive and slowly sent headers alike.
    runner = web.AppRunner(build_app(ctx), access_log=None, handle_signals=False, keepalive_timeout=http.idle_timeout)
    await runner.setup()
    report_requests(runner, ctx.turns)
    host, port = _listen(http.listen)
    tls = _ssl_context(http.tls_cert_file, http.tls_key_file) if http.tls_cert_file else None
    site = web.TCPSite(runner, host, port, ssl_context=tls, reuse_address=True)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(exc.errno, f"cannot listen on {http.listen} ({exc.strerror}): change http.listen") from exc
    log.info("http listening", listen=http.listen, tls=tls is not None)
    return runner


def report_requests(runner: web.AppRunner, turns: Turns) -> None:
    """Tell `turns` of every request as soon as its head is parsed, and of its handler starting
    (lagd.runtime.turns), before the server accepts connections.

    aiohttp answers a request over three turns of the loop: its bytes read and parsed, its
    Request built, its handler run. Reported when built, a request still waited behind a slice
    of every busy background task in the turn between parse and build; reported when parsed,
    they already wait for it there. Where the server's connections do not count the requests
    they parse (`_ParsedRequests.counts`), a request is reported when built instead."""
    server = runner.server
    if server is None:
        raise RuntimeError("the HTTP runner is not set up: call runner.setup() first")
    build, handle, connected = server.request_factory, server.request_handler, server.connection_made

    def made(handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        connected(handler, transport)
        if _ParsedRequests.counts(handler):
            transport.set_protocol(_ParsedRequests(handler, turns))

    def built(message: Any, payload: Any, protocol: Any, *args: Any) -> web.BaseRequest:
        if not _ParsedRequests.counts(protocol):
            turns.arrived()
        return build(message, payload, protocol, *args)

    async def handled(request: web.BaseRequest) -> web.StreamResponse:
        turns.started()
        return await handle(request)

    server.request_factory = built
    server.request_handler = handled
    setattr(server, "connection_made", made)  # noqa: B010 (a method replaced on this server only)


class _ParsedRequests(asyncio.Protocol):
    """A connection's protocol in front of aiohttp's own, telling `turns` of each request its
    bytes complete, in the turn of the loop they are read (see `report_requests`)."""

    __slots__ = ("handler", "turns")

    def __init__(self, handler: web.RequestHandler, turns: Turns) -> None:
        self.handler = handler
        self.turns = turns

    @staticmethod
    def counts(handler: object) -> bool:
        """Does this aiohttp's connection count the requests it parses?"""
        return type(getattr(handler, "_request_count", None)) is int

    def data_received(self, data: bytes) -> None:
        handler = self.handler
        before: int = handler._request_count  # type: ignore[attr-defined]
        handler.data_received(data)
        for _ in range(handler._request_count - before):  # type: ignore[attr-defined]
            self.turns.arrived()

    def eof_received(self) -> None:
        self.handler.eof_received()  # aiohttp's returns None: the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()


def bound_port(runner: web.AppRunner) -> int:
    """The port actually bound (useful with http.listen = "127.0.0.1:0")."""
    for site in runner.sites:
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            return int(server.sockets[0].getsockname()[1])
    raise RuntimeError("the HTTP runner has no listening socket: call start_http first")


async def stop_http(runner: web.AppRunner) -> None:
    await runner.cleanup()
