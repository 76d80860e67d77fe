"""Request dependencies: the service, and who is calling with which scope."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fastapi import Request

from interlock.errors import InterlockError
from interlock.runtime.home import check_run_id
from interlock.server.auth import Authenticator, Principal, RateLimiter
from interlock.server.errors import ApiError, from_interlock

if TYPE_CHECKING:
    from interlock.server.service import Service


def service(request: Request) -> Service:
    """The service the app runs."""
    found: Service = request.app.state.service
    return found


QUERY_TOKEN = (
    "send the token as `Authorization: Bearer TOKEN`: `?token=` is accepted only by the "
    "WebSocket, Server-Sent Events and download URLs, so tokens stay out of proxy logs"
)
TRUE = ("1", "true", "yes", "on")  # what FastAPI reads as a true boolean query value


def bearer(request: Request, *, query: bool = False) -> str | None:
    """The token of `Authorization: Bearer ...`; also `?token=` where `query` allows it
    (streams and downloads, which a browser opens without headers)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    given = request.query_params.get("token")
    if given is None or query:
        return given
    auth: Authenticator = request.app.state.auth
    if auth.config.auth_required:
        raise ApiError(401, "unauthorized", QUERY_TOKEN, {"WWW-Authenticate": "Bearer"})
    return None


def _reader(request: Request, *, query: bool) -> Principal:
    auth: Authenticator = request.app.state.auth
    client = request.client.host if request.client else "?"
    principal = auth.principal(bearer(request, query=query), client)
    auth.require(principal, "read")
    # Reads have a bucket of their own per caller (see `read_rate_limit`): a client polling in
    # a loop is slowed down with 429 and Retry-After, never the others, nor any action.
    limiter: RateLimiter = request.app.state.read_limiter
    limiter.take(principal.key)
    return principal


def reader(request: Request) -> Principal:
    """A caller allowed to read, with the token in the Authorization header."""
    return _reader(request, query=False)


def stream_reader(request: Request) -> Principal:
    """A caller allowed to read a Server-Sent Events stream (EventSource sends no headers,
    so `?token=` is accepted)."""
    return _reader(request, query=True)


def download_reader(request: Request) -> Principal:
    """A caller allowed to read; `?token=` is accepted on `?download=1` links."""
    download = request.query_params.get("download", "").lower() in TRUE
    return _reader(request, query=download)


def exporter(request: Request) -> Principal:
    """A caller allowed to download a run's bundle: the `export` scope, the token in the
    Authorization header only (a bundle is a run's every prompt and log: its token is never
    put in a link), within the rate limit of exports."""
    auth: Authenticator = request.app.state.auth
    client = request.client.host if request.client else "?"
    principal = auth.principal(bearer(request), client)
    auth.require(principal, "export")
    limiter: RateLimiter = request.app.state.limiter
    limiter.take(f"{principal.key}:export")
    return principal


def operator(action: str) -> Callable[[Request], Principal]:
    """A dependency: a caller allowed to act, from an allowed origin, within the rate limit
    of `action`. Each kind of action has its own bucket, so a flood of one (starting runs)
    never holds up another (approving one)."""

    def dependency(request: Request) -> Principal:
        auth: Authenticator = request.app.state.auth
        auth.check_origin(request.headers.get("origin"), request.headers.get("host"))
        client = request.client.host if request.client else "?"
        principal = auth.principal(bearer(request), client)
        auth.require(principal, "operate")
        limiter: RateLimiter = request.app.state.limiter
        limiter.take(f"{principal.key}:{action}")
        return principal

    return dependency


def resolve(svc: Service, run_id: str) -> str:
    """A run id from a URL: checked for shape first (it names a directory), then resolved."""
    try:
        return svc.api.resolve(check_run_id(run_id))
    except InterlockError as exc:
        raise from_interlock(exc) from None
