"""HTTP/1.1 connections with deadlines, so slow or stalled clients cannot hold the server.

uvicorn closes connections that stay idle between requests (`timeout_keep_alive`) and bounds
the size of a request head (h11's incomplete-event limit), but a client that opens a connection
and sends its headers (or its body) a byte at a time is kept for as long as it likes. Here each
request gets `header_timeout` seconds from its first byte (or from the connection's start) to
its last header line, and `body_timeout` seconds from there to the end of its body; past either,
the client gets `408` and the connection is closed. WebSocket connections are handed to the
WebSocket protocol once their handshake request is complete, and are not bounded further.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from interlock.server.errors import body

HEADERS, BODY = "headers", "body"


def timeout_response(phase: str, seconds: float) -> bytes:
    """A complete 408 answer that closes the connection."""
    message = f"the request {phase} did not arrive within {seconds:g}s; the connection is closed"
    data = json.dumps(body("request_timeout", message)).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + data


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's headers and body."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: str | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(HEADERS, self.header_timeout)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Until the next request's first byte, uvicorn's keep-alive timeout is the bound.
        self._disarm()
        if self.conn.their_state is h11.SEND_BODY:
            self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Arm the deadline of the phase the current request is in (or none)."""
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            self._disarm()  # closed, or upgraded to a WebSocket
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._phase != HEADERS:
                self._arm(HEADERS, self.header_timeout)
        elif state is h11.SEND_BODY:
            if self._phase != BODY:
                self._arm(BODY, self.body_timeout)
        else:
            self._disarm()

    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        self._timer = self.loop.call_later(seconds, self._expired, phase, seconds)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._phase = None, None

    def _expired(self, phase: str, seconds: float) -> None:
        self._timer, self._phase = None, None
        if self.transport.is_closing():
            return
        cycle = self.cycle if phase == BODY else None
        answered = cycle is not None and cycle.response_started
        if cycle is not None:
            # The app waiting for the rest of the body sees the client leave; anything it
            # still sends is dropped.
            cycle.disconnected = True
            cycle.message_event.set()
        if not answered:
            self.transport.write(timeout_response(phase, seconds))
        self.transport.close()


def bounded(header_timeout: float, body_timeout: float) -> type[BoundedH11Protocol]:
    """The protocol class with these deadlines (uvicorn builds one instance per connection)."""
    return type(
        "BoundedH11Protocol",
        (BoundedH11Protocol,),
        {"header_timeout": header_timeout, "body_timeout": body_timeout},
    )
