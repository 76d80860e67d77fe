"""Frames sent as bytes built once: a WebSocket frame shared by many clients is serialized
once, then written to each client's connection as it is.

Through starlette, uvicorn and `websockets`, each `send_text` re-encodes the text, frames it
and checks the state of three layers: about 35 us per client per frame, what fan-out to
200 watchers spent most of its time on. A frame built once (`text_frame`) and written with
`RawSender` costs one `transport.write` per client.

`RawSender` needs the `send` uvicorn gave (the guard middleware keeps it in the scope), from
uvicorn's `websockets` sans-I/O protocol (its default when `websockets` is
installed) without extensions (the server declines permessage-deflate); otherwise
`raw_sender` returns None and frames go through `send_text` as before.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, State

from interlock.server.guard import SERVER_SEND


def text_frame(text: str) -> bytes:
    """`text` as one unmasked text frame (what a server sends), ready to write."""
    return Frame(Opcode.TEXT, text.encode()).serialize(mask=False, extensions=[])


class RawSender:
    """Writes prepared frames straight to one client's transport, with uvicorn's own flow
    control (wait while the client's buffer is full) and its state checks."""

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol
        self._connection: Protocol = protocol.conn
        self._writable: asyncio.Event = protocol.writable

    async def send(self, frame: bytes) -> None:
        """Send one frame made by `text_frame`.

        Raises:
            WebSocketDisconnect: the connection is closing or gone.
        """
        await self._writable.wait()  # a slow client waits here, alone
        protocol = self._protocol
        if (
            protocol.disconnected
            or protocol.close_sent
            or self._connection.state is not State.OPEN
            or protocol.transport.is_closing()
        ):
            raise WebSocketDisconnect(code=1006)
        protocol.transport.write(frame)


def raw_sender(websocket: WebSocket) -> RawSender | None:
    """A `RawSender` for this connection, or None when it is not served by a protocol whose
    frames can be written directly (another server, another uvicorn protocol, extensions)."""
    protocol = getattr(websocket.scope.get(SERVER_SEND), "__self__", None)
    connection = getattr(protocol, "conn", None)
    if not isinstance(connection, Protocol) or connection.extensions:
        return None
    if not isinstance(getattr(protocol, "writable", None), asyncio.Event):
        return None
    if not all(hasattr(protocol, name) for name in ("transport", "disconnected", "close_sent")):
        return None
    return RawSender(protocol)
