"""The ASGI app: REST API, streams, dashboard and metrics, with the service's lifetime."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from interlock.errors import InterlockError
from interlock.server import batches, hooks, insight, iterate, review_routes, routes, ws
from interlock.server.auth import Authenticator, RateLimiter
from interlock.server.config import ServerConfig
from interlock.server.deps import reader
from interlock.server.errors import ApiError, body, from_interlock
from interlock.server.guard import Guard, reply
from interlock.server.service import Service

STATIC = Path(__file__).with_name("static")
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


def build_app(config: ServerConfig) -> FastAPI:
    """An app that runs `config`'s service while it is served."""
    config.check()
    config.protect_secrets()
    service = Service(config)
    auth = Authenticator(config)
    limiter = RateLimiter(config.rate_limit, config.rate_burst)
    read_limiter = RateLimiter(config.read_rate_limit, config.read_burst)
    mcp, mcp_running = mcp_endpoint(service, auth, limiter, read_limiter)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await service.start()
        try:
            async with mcp_running():
                yield
        finally:
            await service.close()

    # The API docs' page and its Swagger UI assets come from the installed package, not a CDN,
    # so they work on a machine without internet.
    app = FastAPIOffline(
        title="interlock",
        summary="Runs, their events and outputs; approvals and cancellations.",
        version="1",
        lifespan=lifespan,
        docs_url="/api/docs",
        redoc_url=None,
        openapi_url="/api/openapi.json",
        static_url="/api/docs/assets",
        swagger_ui_oauth2_redirect_url="/api/docs/oauth2-redirect",
    )
    with_bearer(app)
    app.state.service = service
    app.state.auth = auth
    app.state.limiter = limiter
    app.state.read_limiter = read_limiter
    app.state.hook_deliveries = hooks.Seen()
    app.include_router(routes.router)
    app.include_router(batches.router)
    app.include_router(hooks.router)
    app.include_router(iterate.router)
    app.include_router(review_routes.router)
    app.include_router(insight.router)
    app.include_router(ws.router)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(body(exc.code, exc.message), exc.status, headers=exc.headers)

    @app.exception_handler(InterlockError)
    async def interlock_error(_: Request, exc: InterlockError) -> JSONResponse:
        error = from_interlock(exc)
        return JSONResponse(body(error.code, error.message), error.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        return JSONResponse(body("invalid_request", problems), 422)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(body(code, str(exc.detail)), exc.status_code)

    @app.exception_handler(Exception)
    async def failed(_: Request, exc: Exception) -> JSONResponse:
        # Logged with its traceback by the server; the client gets the usual JSON shape.
        return JSONResponse(body("internal", "the server failed; its log says why"), 500)

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        reader(request)
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/", include_in_schema=False)
    async def index() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.middleware("http")
    async def headers(request: Request, call_next):  # type: ignore[no-untyped-def]
        response: Response = await call_next(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        if request.url.path.startswith("/ui"):
            response.headers["Content-Security-Policy"] = CSP
        return response

    app.router.routes.append(Route("/mcp", mcp, include_in_schema=False))
    app.mount("/ui", StaticFiles(directory=STATIC, html=True), name="ui")
    app.add_middleware(Guard, auth=auth, max_body=config.max_body)
    if auth.allowed_origins:
        # Outermost, so that every answer to an allowed origin (errors included) is readable by
        # its page, and preflights are answered before any route runs. Tokens travel in the
        # Authorization header, never in cookies: no credentials mode.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=sorted(auth.allowed_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            expose_headers=["Retry-After", "Content-Disposition", "X-Next-Cursor"],
            max_age=600,
        )
    return app


def mcp_endpoint(
    service: Service, auth: Authenticator, limiter: RateLimiter, read_limiter: RateLimiter
) -> tuple[ASGIApp, Callable[[], AbstractAsyncContextManager[None]]]:
    """The MCP server's app for `/mcp` and what runs beside it while serving; without the
    `mcp` extra, an answer that names it."""
    try:
        from interlock.mcpserver.http import McpEndpoint
    except ImportError:
        return NotInstalled(), contextlib.nullcontext
    endpoint = McpEndpoint(service, auth, limiter, read_limiter)
    return endpoint, endpoint.running


class NotInstalled:
    """`/mcp` without the MCP SDK: an error that names the extra to install."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = "the MCP server needs an extra: pip install 'interlock[mcp]'"
        await reply(send, ApiError(501, "not_installed", message))


def with_bearer(app: FastAPI) -> None:
    """Declare the bearer token in the OpenAPI document, so the docs page can send one."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes["bearer"] = {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
        schema["security"] = [{"bearer": []}]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
