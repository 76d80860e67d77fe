"""The HTTP side shared by the chat providers: connection pool, limits, retries, errors.

`HttpEndpoint.stream` sends one streaming POST and hands the server-sent events to a
provider-specific consumer. Before the response starts it retries what `RetryPolicy`
allows; once the stream has started nothing is retried here, because fragments were
already forwarded as progress and the engine decides about a new attempt.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any, TypeVar

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from interlock.providers.base import ProviderError, ProviderTimeout
from interlock.providers.limits import ProviderLimiter
from interlock.providers.redaction import Secret, join_url, remember, safe_url, scrub
from interlock.providers.retry import (
    RetryPolicy,
    describe_wait,
    is_retryable_status,
    retry_after_of,
)

logger = logging.getLogger("interlock.providers")


class _ScrubRecords(logging.Filter):
    """Masks keys in the HTTP libraries' own log lines: httpx logs each request's full URL,
    and httpcore's debug trace each response's status line and headers, which a server may
    have filled with the key it was sent."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = scrub(record.getMessage()), None
        return True


# A filter applies to the records of its own logger only, so each one gets it.
for _name in (
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


class ClientPool:
    """One `httpx.AsyncClient` per event loop, reused by every call to a provider."""

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._transport = transport
        self._current: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None

    def get(self) -> httpx.AsyncClient:
        """The client for the running loop, created on first use."""
        loop = asyncio.get_running_loop()
        if self._current is None or self._current[0] is not loop or self._current[1].is_closed:
            # Connections are bound to the loop that opened them, so a new loop needs a
            # new client.
            self._current = (loop, httpx.AsyncClient(transport=self._transport, timeout=None))
        return self._current[1]

    async def aclose(self) -> None:
        """Close the client of the running loop, if any."""
        if self._current is not None and self._current[0] is asyncio.get_running_loop():
            await self._current[1].aclose()
        self._current = None


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
    ) -> T:
        """POST `body` to `path`, retrying before the stream starts, and consume the events
        (or, when the server answers with one JSON document, `parse` it).

        Every failure raised here, the consumer's included (an error event inside the
        stream), has the key masked from its message.

        Raises:
            ProviderTimeout: The call did not finish within `timeout` seconds.
            ProviderError: The provider refused the request or the stream broke.
        """
        remember(secret)
        try:
            return await self._stream(
                path, headers, body, timeout, estimated_tokens, consume, parse
            )
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
    ) -> T:
        url = join_url(self.base_url, path)
        shown = safe_url(url)  # user info or a query string may hold a key
        deadline = time.monotonic() + timeout
        for attempt in range(1, self.retry.max_attempts + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProviderTimeout(f"{self.name}: no complete answer within {timeout:g}s")
            await self.limiter.admit(estimated_tokens)
            started = False
            retry_after: float | None = None
            try:
                async with asyncio.timeout(remaining):
                    client = self.pool.get()
                    request_headers = {"Accept": "text/event-stream", **headers}
                    async with client.stream(
                        "POST", url, json=body, headers=request_headers, timeout=remaining
                    ) as response:
                        if response.is_success and parse is not None and _is_json(response):
                            started = True
                            return parse(_json_answer(self.name, await response.aread()))
                        if response.is_success:
                            started = True
                            # aclosing: consumers may stop early (at [DONE]), and the
                            # generator must be closed while the response is still open.
                            async with aclosing(EventSource(response).aiter_sse()) as events:
                                return await consume(events)
                        raw = await response.aread()
                        status = response.status_code
                        retry_after = retry_after_of(response.headers)
                        failure = ProviderError(
                            f"{self.name}: HTTP {status} from {shown}: {error_message(raw)}",
                            retryable=is_retryable_status(status),
                            status=status,
                            retry_after=retry_after,
                        )
            except (TimeoutError, httpx.TimeoutException):
                raise ProviderTimeout(
                    f"{self.name}: no complete answer within {timeout:g}s from {shown}"
                ) from None
            except SSEError as exc:
                raise ProviderError(
                    f"{self.name}: {shown} did not answer with an event stream ({exc})",
                    retryable=False,
                ) from None
            except httpx.TransportError as exc:
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


def _is_json(response: httpx.Response) -> bool:
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return bool(kind == "application/json" or kind.endswith("+json"))


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
