"""Request dependencies: the service, and who is calling with which scope."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request

from interlock.errors import InterlockError
from interlock.runtime.home import check_run_id
from interlock.server.auth import Authenticator, Principal, RateLimiter
from interlock.server.errors import from_interlock

if TYPE_CHECKING:
    from interlock.server.service import Service


def service(request: Request) -> Service:
    """The service the app runs."""
    found: Service = request.app.state.service
    return found


def bearer(request: Request) -> str | None:
    """The token of `Authorization: Bearer ...`, or of `?token=` (for EventSource)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.query_params.get("token")


def reader(request: Request) -> Principal:
    """A caller allowed to read."""
    auth: Authenticator = request.app.state.auth
    client = request.client.host if request.client else "?"
    principal = auth.principal(bearer(request), client)
    auth.require(principal, "read")
    return principal


def operator(request: Request) -> Principal:
    """A caller allowed to act, from an allowed origin, within its rate limit."""
    auth: Authenticator = request.app.state.auth
    auth.check_origin(request.headers.get("origin"), request.headers.get("host"))
    client = request.client.host if request.client else "?"
    principal = auth.principal(bearer(request), client)
    auth.require(principal, "operate")
    limiter: RateLimiter = request.app.state.limiter
    limiter.take(principal.key)
    return principal


def resolve(svc: Service, run_id: str) -> str:
    """A run id from a URL: checked for shape first (it names a directory), then resolved."""
    try:
        return svc.api.resolve(check_run_id(run_id))
    except InterlockError as exc:
        raise from_interlock(exc) from None
