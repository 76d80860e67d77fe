"""ASGI middleware in front of every route: the Host check (DNS rebinding) and request body
limits (size; for the JSON of a POST, nesting, numbers and text: `bodies`), answered before
any route code or body parsing runs. It also keeps a WebSocket's
`send` as the server gave it (`SERVER_SEND` in the scope), before the routes' own wrappers,
for the frames written as prepared bytes (see `wire.py`)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from interlock.server import bodies
from interlock.server.auth import Authenticator
from interlock.server.errors import ApiError, body

SERVER_SEND = "interlock.server_send"


async def reply(send: Send, error: ApiError) -> None:
    """Answer an HTTP request with the JSON error."""
    data = json.dumps(body(error.code, error.message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class Guard:
    """Refuses foreign Host headers and bodies larger than `max_body` bytes."""

    def __init__(self, app: ASGIApp, auth: Authenticator, max_body: int) -> None:
        self.app, self.auth, self.max_body = app, auth, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            self.auth.check_host(headers.get("host"))
        except ApiError as error:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": error.message})
            else:
                await reply(send, error)
            return
        if scope["type"] == "websocket":
            scope[SERVER_SEND] = send
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
            # Every POST body is JSON (a PUT is an output's text): read it (within the limit)
            # and check it before any route parses it.
            receive = await self._bounded(headers, receive, send, json=scope["method"] == "POST")
            if receive is None:
                return
        await self.app(scope, receive, send)

    async def _bounded(
        self, headers: dict[str, str], receive: Receive, send: Send, *, json: bool
    ) -> Any:
        too_big = ApiError(
            413, "too_large", f"the request body is larger than {self.max_body} bytes"
        )
        length = headers.get("content-length")
        if length is not None and length.isdigit():
            if int(length) > self.max_body:
                await reply(send, too_big)
                return None
            if not json:
                return receive
        chunks, size = [], 0  # read (at most the limit) before routing
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body:
                await reply(send, too_big)
                return None
            if not message.get("more_body"):
                break
        data = b"".join(chunks)
        reason = bodies.problem(data) if json and data.strip() else None
        if reason is not None:
            await reply(send, ApiError(400, "bad_request", reason))
            return None
        replay: list[Message] = [{"type": "http.request", "body": data}]

        async def replayed() -> Message:
            return replay.pop() if replay else await receive()

        return replayed
