"""Server-sent events read from a response body, as the wire-format parsers consume them.

The parsers take an async iterator of `ServerSentEvent` (``.event``, ``.data``, ``.id``,
``.retry``); this module makes one from the body's byte chunks, following the
event-stream format of the HTML standard: lines end in CRLF, LF or CR; ``field: value``
lines accumulate; a blank line dispatches; lines starting with ``:`` are comments. Chunks are
decoded a batch at a time rather than a line per await, which is what keeps a stream of many
small fragments cheap.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass

__all__ = ["EventDecoder", "ServerSentEvent", "events_of"]


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event: its type (``message`` when the stream names none), its data
    lines joined by newlines, the last event id seen, and the reconnection time it set."""

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


_LINE_ENDS = frozenset((b"\n", b"\r\n", b"\r"))  # an empty line: the event is complete


class EventDecoder:
    """Turns byte chunks into events; keeps what an unfinished line or event holds so far."""

    def __init__(self) -> None:
        self._pending = b""  # the start of a line whose end has not arrived
        self._event = ""
        self._data: list[str] = []
        self._id = ""
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events completed by `chunk`."""
        text = self._pending + chunk if self._pending else chunk
        lines = text.splitlines(keepends=True)  # bytes split at CR, LF and CRLF only
        # A last line without its end waits for the next chunk; so does one ending in CR,
        # whose LF may be the next chunk's first byte.
        if lines and not lines[-1].endswith(b"\n"):
            self._pending = lines.pop()
        else:
            self._pending = b""
        found = []
        for raw in lines:
            # Nearly every line of a model's stream is a payload or the blank line after it:
            # those two are taken here without the general field parsing of `_line`.
            if raw.startswith(b"data: "):
                self._data.append(raw[6:].rstrip(b"\r\n").decode("utf-8", errors="replace"))
                continue
            if raw in _LINE_ENDS:
                event = self._dispatch()
            else:
                event = self._line(raw.rstrip(b"\r\n").decode("utf-8", errors="replace"))
            if event is not None:
                found.append(event)
        return found

    def end(self) -> list[ServerSentEvent]:
        """The events the body's end completes (a last line without its line end)."""
        pending, self._pending = self._pending, b""
        if not pending:
            return []
        event = self._line(pending.rstrip(b"\r\n").decode("utf-8", errors="replace"))
        return [event] if event is not None else []

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment (servers send them to keep connections alive)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            with contextlib.suppress(ValueError):
                self._retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not (self._event or self._data or self._id or self._retry is not None):
            return None
        event = ServerSentEvent(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self._id,
            retry=self._retry,
        )
        self._event, self._data, self._retry = "", [], None
        return event


async def events_of(chunks: AsyncIterable[bytes]) -> AsyncGenerator[ServerSentEvent, None]:
    """The events of a body arriving as `chunks`."""
    decoder = EventDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.end():
        yield event
