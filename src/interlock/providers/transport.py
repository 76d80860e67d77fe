"""The HTTP side shared by the chat providers: connection pool, limits, retries, errors.

`HttpEndpoint.stream` sends one streaming POST and hands the server-sent events to a
provider-specific consumer. Before the response starts it retries what `RetryPolicy`
allows; once the stream has started nothing is retried here, because fragments were
already forwarded as progress and the engine decides about a new attempt.

Requests go through aiohttp: with a thousand calls at once, its connection pool hands out
connections in constant time per request, where httpx's (httpcore's) pool rescans every
queued request on each change and cost 20 ms of CPU per call (benchmarks/README.md, `llm`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing, suppress
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import orjson

from interlock.providers.base import ProviderError, ProviderTimeout
from interlock.providers.bounds import ERROR_BODY_BYTES, AnswerLimits
from interlock.providers.limits import ProviderLimiter
from interlock.providers.redaction import Secret, join_url, remember, safe_url, scrub
from interlock.providers.retry import (
    RetryPolicy,
    describe_wait,
    hold_of,
    is_retryable_status,
    retry_after_of,
)
from interlock.providers.sse import EventTooLarge, ServerSentEvent, events_of

logger = logging.getLogger("interlock.providers")


class _ScrubRecords(logging.Filter):
    """Masks keys in the HTTP libraries' own log lines: a library may log a request's full
    URL, or a response's status line and headers, which a server may have filled with the
    key it was sent."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = scrub(record.getMessage()), None
        return True


# A filter applies to the records of its own logger only, so each one gets it.
for _name in (
    "aiohttp",
    "aiohttp.client",
    "aiohttp.internal",
    "aiohttp.access",
    "aiohttp.server",
    "aiohttp.web",
    "aiohttp.websocket",
    "httpx",
    "httpcore.connection",
    "httpcore.connection_pool",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
):
    logging.getLogger(_name).addFilter(_ScrubRecords())

T = TypeVar("T")
EventConsumer = Callable[[AsyncIterator[ServerSentEvent]], Awaitable[T]]
AnswerParser = Callable[[dict[str, Any]], T]
"""Reads a complete JSON answer: the server was asked for one (``stream: false``), or it
answered JSON although it was asked to stream."""

_NO_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=None, sock_read=None)


class NotAnEventStream(Exception):
    """A successful answer to a stream request that is neither an event stream nor JSON."""


class ClientPool:
    """One `aiohttp.ClientSession` per event loop, reused by every call to a provider.

    Args:
        max_connections: Connections open at once (None: as many as calls need; the
            provider's `ProviderLimiter` already bounds the calls).
    """

    def __init__(self, *, max_connections: int | None = None) -> None:
        self.max_connections = max_connections
        self._current: tuple[asyncio.AbstractEventLoop, aiohttp.ClientSession] | None = None
        self._closers: set[asyncio.Task[None]] = set()

    def get(self) -> aiohttp.ClientSession:
        """The session for the running loop, created on first use."""
        loop = asyncio.get_running_loop()
        current = self._current
        if current is None or current[0] is not loop or current[1].closed:
            # Connections are bound to the loop that opened them, so a new loop needs a
            # new session.
            connector = aiohttp.TCPConnector(limit=self.max_connections or 0, limit_per_host=0)
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=_NO_TIMEOUT,  # each call's own deadline applies (see `stream`)
                # Proxies come from the environment once per endpoint (`proxy_for`): with
                # trust_env aiohttp would read them, and ~/.netrc, on every request.
                trust_env=False,
                auto_decompress=True,
            )
            current = self._current = (loop, session)
            closer = loop.create_task(_close_at_loop_end(session))
            self._closers.add(closer)
            closer.add_done_callback(self._closers.discard)
        return current[1]

    async def aclose(self) -> None:
        """Close the session of the running loop, if any."""
        if self._current is not None and self._current[0] is asyncio.get_running_loop():
            await self._current[1].close()
        self._current = None


async def _close_at_loop_end(session: aiohttp.ClientSession) -> None:
    """Wait until the loop's end cancels this task (asyncio.run cancels what is left), then
    close `session`: its connections must not outlive their loop unclosed."""
    with suppress(asyncio.CancelledError):
        await asyncio.get_running_loop().create_future()
    if not session.closed:
        await session.close()


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, with
    NO_PROXY honoured), or None."""
    proxies = urllib.request.getproxies()
    if not proxies:
        return None
    parts = urlsplit(url)
    if urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxies.get(parts.scheme) or proxies.get("all")


def error_message(raw: bytes) -> str:
    """The provider's own explanation from an error body.

    OpenAI, Anthropic and most compatible servers put it at ``error.message``; some local
    servers send ``{"error": "..."}``; anything else is shown as (shortened) text.
    """
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        payload = json.loads(text)
    except ValueError:
        return text[:500] or "(empty response body)"
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        kind = error.get("type") or error.get("code")
        return f"{error['message']} ({kind})" if kind else error["message"]
    if isinstance(error, str):
        return error
    return text[:500]


class HttpEndpoint:
    """A provider's base URL with its pool, limiter and retry policy (shared per provider).

    Args:
        name: The provider name from the configuration, used in messages.
        base_url: Everything before the API path, e.g. ``http://localhost:11434/v1``.
        limiter: The provider's shared limits.
        retry: Transport retry rules.
        pool: Where clients come from; tests pass one built on a custom transport.
    """

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        limiter: ProviderLimiter,
        retry: RetryPolicy,
        pool: ClientPool | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.limiter = limiter
        self.retry = retry
        self.pool = pool or ClientPool()
        self.proxy = proxy_for(self.base_url)
        self._url_of: dict[str, tuple[str, str]] = {}

    def __repr__(self) -> str:
        return f"HttpEndpoint(name={self.name!r}, base_url={safe_url(self.base_url)!r})"

    async def stream(
        self,
        *,
        path: str,
        headers: Mapping[str, str],
        body: dict[str, Any],
        timeout: float,
        estimated_tokens: int,
        secret: Secret | None,
        consume: EventConsumer[T],
        parse: AnswerParser[T] | None = None,
        limits: AnswerLimits | None = None,
    ) -> T:
        """POST `body` to `path`, retrying before the stream starts, and consume the events
        (or, when the server answers with one JSON document, `parse` it).

        Every failure raised here, the consumer's included (an error event inside the
        stream), has the key masked from its message. `limits` bound the stream's lines and
        a JSON answer's body (the consumer bounds what it keeps of the answer).

        Raises:
            ProviderTimeout: The call did not finish within `timeout` seconds.
            AnswerTooLarge: A line of the stream, or a JSON answer, passed its limit.
            ProviderError: The provider refused the request or the stream broke.
        """
        remember(secret)
        try:
            return await self._stream(
                path, headers, body, timeout, estimated_tokens, consume, parse,
                limits or AnswerLimits(),
            )  # fmt: skip
        except ProviderTimeout as exc:
            raise ProviderTimeout(scrub(str(exc), [secret])) from None
        except ProviderError as exc:
            raise exc.with_message(scrub(str(exc), [secret])) from None

    async def _stream(
        self,
        path: str,
        headers: Mapping[str, str],
        body: dict[str, Any],
        timeout: float,
        estimated_tokens: int,
        consume: EventConsumer[T],
        parse: AnswerParser[T] | None,
        limits: AnswerLimits,
    ) -> T:
        url, shown = self._urls(path)
        deadline = time.monotonic() + timeout
        # The model names its buckets when the provider limits each model on its own.
        named = body.get("model")
        model = named if isinstance(named, str) else ""
        payload = _encode(body)
        request_headers = {
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
            **headers,
        }
        for attempt in range(1, self.retry.max_attempts + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProviderTimeout(f"{self.name}: no complete answer within {timeout:g}s")
            try:
                # Waiting for the rate limits (or a provider's hold) is part of the call.
                async with asyncio.timeout(remaining):
                    await self.limiter.admit(estimated_tokens, model)
            except TimeoutError:
                raise ProviderTimeout(
                    f"{self.name}: no complete answer within {timeout:g}s: the rate limits of "
                    "its key (or the provider's wait after a 429) let no request out in time"
                ) from None
            remaining = deadline - time.monotonic()
            started = False
            retry_after: float | None = None
            try:
                async with asyncio.timeout(remaining):
                    session = self.pool.get()
                    async with session.post(
                        url,
                        data=payload,
                        headers=request_headers,
                        allow_redirects=False,
                        proxy=self.proxy,
                    ) as response:
                        # A provider's "wait" holds every call sharing the buckets.
                        hold = hold_of(response.status, response.headers)
                        if hold is not None:
                            await self.limiter.hold_off(hold, model)
                        success = 200 <= response.status < 300
                        if success and parse is not None and _is_json(response):
                            started = True
                            raw = await _read_at_most(response, limits.max_answer_bytes)
                            if raw is None:
                                raise limits.answer_too_large(self.name, "the JSON answer")
                            return parse(_json_answer(self.name, raw))
                        if success:
                            started = True
                            _check_event_stream(response)
                            # aclosing: consumers may stop early (at [DONE]), and the
                            # generator must be closed while the response is still open.
                            chunks = response.content.iter_any()
                            events = events_of(chunks, max_line_bytes=limits.max_line_bytes)
                            async with aclosing(events):
                                return await consume(events)
                        # Only the message of an error is shown: its start is enough.
                        raw = await _read_at_most(response, ERROR_BODY_BYTES, cut=True) or b""
                        status = response.status
                        retry_after = retry_after_of(response.headers)
                        failure = ProviderError(
                            f"{self.name}: HTTP {status} from {shown}: {error_message(raw)}",
                            retryable=is_retryable_status(status)
                            and not (status == 500 and _asks_structured(body)),
                            status=status,
                            retry_after=retry_after,
                        )
            except TimeoutError:  # aiohttp's own timeouts are TimeoutErrors too
                raise ProviderTimeout(
                    f"{self.name}: no complete answer within {timeout:g}s from {shown}"
                ) from None
            except EventTooLarge:
                raise limits.line_too_long(self.name) from None
            except NotAnEventStream as exc:
                raise ProviderError(
                    f"{self.name}: {shown} did not answer with an event stream ({exc})",
                    retryable=False,
                ) from None
            except aiohttp.ClientError as exc:
                detail = f"{type(exc).__name__}: {exc}"
                failure = ProviderError(
                    f"{self.name}: connection to {shown} failed: {detail}", retryable=True
                )
                if started:
                    # Output was already streamed; a fresh attempt is the engine's call.
                    raise ProviderError(
                        f"{self.name}: the stream from {shown} broke off: {detail}",
                        retryable=True,
                    ) from None
            await self._pause_before_retry(failure, attempt, retry_after, deadline)
        raise AssertionError("unreachable: the retry loop always returns or raises")

    def _urls(self, path: str) -> tuple[str, str]:
        """The URL of `path`, and how messages show it (without user info or a query string,
        which may hold a key); worked out once per path, not once per call."""
        urls = self._url_of.get(path)
        if urls is None:
            url = join_url(self.base_url, path)
            urls = self._url_of[path] = (url, safe_url(url))
        return urls

    async def _pause_before_retry(
        self, failure: ProviderError, attempt: int, retry_after: float | None, deadline: float
    ) -> None:
        """Sleep before the next request, or raise `failure` when no retry is allowed.

        A failure raised with a Retry-After carries it, so the engine's next attempt waits
        at least as long as the server asked, and its message says when that is.
        """
        wait = f"; the server asked to wait {describe_wait(retry_after)}" if retry_after else ""
        if not failure.retryable or attempt >= self.retry.max_attempts:
            raise failure.with_message(f"{failure}{wait}")
        if retry_after is not None and retry_after > self.retry.max_retry_after_s:
            raise failure.with_message(
                f"{failure}{wait}, longer than max_retry_after_s="
                f"{self.retry.max_retry_after_s:g}; the next attempt waits for it"
            )
        delay = self.retry.delay(attempt, retry_after)
        if time.monotonic() + delay >= deadline:
            raise failure.with_message(
                f"{failure} (not retried: waiting {delay:.1f}s would pass the call's timeout)"
            )
        logger.warning(
            "%s: %s; retry %d of %d in %.1fs",
            self.name,
            f"HTTP {failure.status}" if failure.status else "connection failed",
            attempt,
            self.retry.max_attempts - 1,
            delay,
        )
        await self.retry.sleep(delay)


def _asks_structured(body: dict[str, Any]) -> bool:
    """Whether `body` asks for native structured output. An internal error (500) answered to
    it is not retried as it stands: servers that cannot compile a schema fail that way
    (llama-cpp-python), and the caller asks again with the schema in the prompt instead."""
    answer_format = body.get("response_format")
    if isinstance(answer_format, dict) and answer_format.get("type") == "json_schema":
        return True
    config = body.get("output_config")
    return (isinstance(config, dict) and "format" in config) or "output_format" in body


def _encode(body: dict[str, Any]) -> bytes:
    """The request body as JSON; what orjson refuses (integers beyond 64 bits, keys that are
    not strings) goes through the standard encoder."""
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


async def _read_at_most(
    response: aiohttp.ClientResponse, limit: int, *, cut: bool = False
) -> bytes | None:
    """The body, read as it arrives; None once it passes `limit` bytes (or, with `cut`, its
    first `limit` bytes). What was not read is never buffered: the connection is dropped."""
    declared = response.content_length
    if declared is not None and declared > limit and not cut:
        return None
    parts: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            if not cut:
                return None
            break
    return b"".join(parts)[:limit]


def _is_json(response: aiohttp.ClientResponse) -> bool:
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return bool(kind == "application/json" or kind.endswith("+json"))


def _check_event_stream(response: aiohttp.ClientResponse) -> None:
    """Raise `NotAnEventStream` unless the answer says it is one."""
    kind = response.headers.get("content-type", "")
    if "text/event-stream" not in kind.lower():
        raise NotAnEventStream(
            f"expected Content-Type 'text/event-stream', got {kind or '(none)'!r}"
        )


def _json_answer(name: str, raw: bytes) -> dict[str, Any]:
    """A complete JSON answer as an object; an error object in a 200 answer is a failure."""
    try:
        payload = json.loads(raw)
    except ValueError:
        raise ProviderError(f"{name}: the JSON answer is unreadable", retryable=True) from None
    if not isinstance(payload, dict):
        raise ProviderError(f"{name}: the JSON answer is not an object", retryable=True)
    if "error" in payload and not payload.get("choices") and not payload.get("content"):
        raise ProviderError(f"{name}: error in the answer: {error_message(raw)}", retryable=True)
    return payload
