"""Server-sent events read from a response body, as the wire-format parsers consume them.

The parsers take an async iterator of `ServerSentEvent` (``.event``, ``.data``, ``.id``,
``.retry``); this module makes one from the body's byte chunks, following the
event-stream format of the HTML standard: lines end in CRLF, LF or CR; ``field: value``
lines accumulate; a blank line dispatches; lines starting with ``:`` are comments. Chunks are
decoded a batch at a time rather than a line per await, which is what keeps a stream of many
small fragments cheap.

The work is linear in the body's size: an unfinished line is kept in a buffer that grows in
place, and only a chunk that holds a line end is split. A line (or an event's data lines
together) longer than `max_line_bytes` raises `EventTooLarge` instead of being kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass

__all__ = ["EventDecoder", "EventTooLarge", "ServerSentEvent", "events_of"]


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event: its type (``message`` when the stream names none), its data
    lines joined by newlines, the last event id seen, and the reconnection time it set."""

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


_LINE_ENDS = frozenset((b"\n", b"\r\n", b"\r"))  # an empty line: the event is complete


class EventTooLarge(Exception):
    """A line, or the data of one event, passed the decoder's `max_line_bytes`."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"a line or event of the stream passed {limit} bytes")
        self.limit = limit


class EventDecoder:
    """Turns byte chunks into events; keeps what an unfinished line or event holds so far.

    Args:
        max_line_bytes: The longest line, and the most data of one event, kept (None: no
            bound).

    Attributes:
        scanned: Bytes split into lines so far: the decoder's work, which stays within twice
            the body's size however the body is cut.
    """

    def __init__(self, *, max_line_bytes: int | None = None) -> None:
        self.max_line_bytes = max_line_bytes
        self.scanned = 0
        self._pending = bytearray()  # the start of a line whose end has not arrived
        self._event = ""
        self._data: list[str] = []
        self._data_size = 0  # characters in `_data`
        self._id = ""
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events completed by `chunk`.

        Raises:
            EventTooLarge: A line or an event passed `max_line_bytes`.
        """
        if self._pending:
            # Only the new bytes can end the pending line (one that ends in CR is complete,
            # and waits only to see whether an LF follows).
            if not self._pending.endswith(b"\r") and b"\n" not in chunk and b"\r" not in chunk:
                self._pending += chunk  # grows in place: no copy of what is already there
                self._check(len(self._pending))
                return []
            text = bytes(self._pending) + chunk
            self._pending.clear()
        else:
            text = chunk
        self.scanned += len(text)
        lines = text.splitlines(keepends=True)  # bytes split at CR, LF and CRLF only
        # A last line without its end waits for the next chunk; so does one ending in CR,
        # whose LF may be the next chunk's first byte.
        if lines and not lines[-1].endswith(b"\n"):
            self._pending += lines.pop()
            self._check(len(self._pending))
        found = []
        for raw in lines:
            self._check(len(raw))
            # Nearly every line of a model's stream is a payload or the blank line after it:
            # those two are taken here without the general field parsing of `_line`.
            if raw.startswith(b"data: "):
                self._add_data(raw[6:].rstrip(b"\r\n").decode("utf-8", errors="replace"))
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
        pending = bytes(self._pending)
        self._pending.clear()
        if not pending:
            return []
        event = self._line(pending.rstrip(b"\r\n").decode("utf-8", errors="replace"))
        return [event] if event is not None else []

    def _check(self, size: int) -> None:
        if self.max_line_bytes is not None and size > self.max_line_bytes:
            raise EventTooLarge(self.max_line_bytes)

    def _add_data(self, value: str) -> None:
        self._data_size += len(value) + 1
        self._check(self._data_size)
        self._data.append(value)

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment (servers send them to keep connections alive)
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._add_data(value)
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
        self._event, self._data, self._data_size, self._retry = "", [], 0, None
        return event


async def events_of(
    chunks: AsyncIterable[bytes], *, max_line_bytes: int | None = None
) -> AsyncGenerator[ServerSentEvent, None]:
    """The events of a body arriving as `chunks`.

    Raises:
        EventTooLarge: A line or an event passed `max_line_bytes`.
    """
    decoder = EventDecoder(max_line_bytes=max_line_bytes)
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
    for event in decoder.end():
        yield event
