"""The MCP server under `interlock serve`, at `/mcp` (streamable HTTP, stateless, JSON
answers), behind the API's bearer tokens and scopes.

Every request to `/mcp` is authenticated before the MCP app sees it, as the API's routes are:
a valid token with the `read` scope (any caller when auth is off), from an allowed origin.
The caller is left in the ASGI scope, where each tool reads it to require the scope its REST
route requires (`operate` to act) and to count actions against the same rate limits.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from interlock.mcpserver.backend import PRINCIPAL_KEY, Backend
from interlock.mcpserver.pipelines import Pipelines
from interlock.mcpserver.server import build
from interlock.server.deps import bearer
from interlock.server.errors import ApiError
from interlock.server.guard import reply

if TYPE_CHECKING:
    from interlock.server.auth import Authenticator, RateLimiter
    from interlock.server.service import Service


class McpEndpoint:
    """The ASGI app served at `/mcp`: authenticate, then hand the request to the SDK."""

    def __init__(
        self,
        service: Service,
        auth: Authenticator,
        limiter: RateLimiter,
        read_limiter: RateLimiter | None = None,
    ) -> None:
        backend = Backend(
            api=service.api,
            pipelines=Pipelines(service.workflows),
            local=False,
            limit=limiter.take,
            reads=service.reads,
            stopping=lambda: service.stop,  # the service makes a new event when it starts
        )
        self.server = build(backend)
        # The Guard in front of every route already refuses foreign Host headers, and the
        # origin is checked below: the SDK's own check would refuse a server's real name.
        self.server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.auth = auth
        self.read_limiter = read_limiter

    def running(self) -> AbstractAsyncContextManager[None]:
        """The SDK's session manager, run for the app's lifetime."""
        return self.server.session_manager.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope)
        try:
            self.auth.check_origin(request.headers.get("origin"), request.headers.get("host"))
            client = request.client.host if request.client else "?"
            principal = self.auth.principal(bearer(request), client)
            self.auth.require(principal, "read")
            if self.read_limiter is not None:  # each request is at least a read
                self.read_limiter.take(principal.key)
        except ApiError as error:
            await reply(send, error)
            return
        scope[PRINCIPAL_KEY] = principal
        await self.server.session_manager.handle_request(scope, receive, send)
