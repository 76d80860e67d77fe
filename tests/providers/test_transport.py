"""The HTTP layer under the providers: event-stream decoding, the session per loop, and its
connection limit."""

from __future__ import annotations

import asyncio
import random
import warnings

import pytest

from interlock.providers import (
    HttpEndpoint,
    OpenAIChatProvider,
    ProviderLimiter,
    RetryPolicy,
    Secret,
)
from interlock.providers.sse import EventDecoder
from interlock.providers.transport import ClientPool, proxy_for

from .conftest import API_KEY, RecordingSleep
from .fake_llm_server import FakeServer, Fault
from .helpers import request, resolved


def test_events_are_the_same_however_the_body_is_cut() -> None:
    """A body cut into chunks at every byte (a CR and its LF apart included) decodes to the
    same events as in one piece: data lines joined, comments skipped, event names and ids
    kept, a last event without its blank line not dispatched."""
    body = (
        b": keep-alive\r\n"
        b'event: delta\r\ndata: {"a": 1}\r\n\r\n'
        b"data: line one\ndata: line two\nid: 7\n\n"
        b"data:no space\rretry: 1500\r\r"
        b"data: caf\xc3\xa9\n\n"
        b"data: [DONE]"
    )
    whole = EventDecoder()
    expected = whole.feed(body) + whole.end()
    assert [(e.event, e.data, e.id, e.retry) for e in expected] == [
        ("delta", '{"a": 1}', "", None),
        ("message", "line one\nline two", "7", None),
        ("message", "no space", "7", 1500),
        ("message", "café", "7", None),
    ]
    for size in (1, 2, 3, 5, 7):
        decoder = EventDecoder()
        found = []
        for start in range(0, len(body), size):
            found += decoder.feed(body[start : start + size])
        found += decoder.end()
        assert [(e.event, e.data, e.id, e.retry) for e in found] == [
            (e.event, e.data, e.id, e.retry) for e in expected
        ], size


def test_connections_stay_within_the_pool_limit(server: FakeServer) -> None:
    """Six calls at once through a pool of two connections reach the server two at a time
    (the limiter allows all six) and all answer."""
    server.fail_next(*[Fault(delay=0.2) for _ in range(6)])
    endpoint = HttpEndpoint(
        name="fake",
        base_url=server.url + "/v1",
        limiter=ProviderLimiter(max_concurrency=None),
        retry=RetryPolicy(sleep=RecordingSleep(), rng=random.Random(7)),
        pool=ClientPool(max_connections=2),
    )
    provider = OpenAIChatProvider(endpoint=endpoint, resolved=resolved(), api_key=Secret(API_KEY))

    async def six() -> list[str]:
        results = await asyncio.gather(*(provider.complete(request()) for _ in range(6)))
        return [r.text for r in results]

    assert asyncio.run(six()) == ["Hello, world."] * 6
    assert server.state.max_in_flight == 2


def test_each_loop_gets_a_session_closed_when_the_loop_ends(server: FakeServer) -> None:
    """Calls from two event loops one after another each get a session of their own, and
    each is closed when its loop ends, with no warning about unclosed connections."""
    pool = ClientPool()
    endpoint = HttpEndpoint(
        name="fake",
        base_url=server.url + "/v1",
        limiter=ProviderLimiter(max_concurrency=2),
        retry=RetryPolicy(sleep=RecordingSleep()),
        pool=pool,
    )
    provider = OpenAIChatProvider(endpoint=endpoint, resolved=resolved(), api_key=Secret(API_KEY))
    sessions = []

    async def call() -> str:
        text = (await provider.complete(request())).text
        sessions.append(pool.get())
        return text

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert asyncio.run(call()) == asyncio.run(call()) == "Hello, world."
    assert sessions[0] is not sessions[1]
    assert all(session.closed for session in sessions)


def test_the_proxy_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint goes through the proxy the environment names for its scheme, and through
    none for a host NO_PROXY lists."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    assert proxy_for("https://api.example.com/v1") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.local:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    assert proxy_for("https://api.example.com/v1") == "http://proxy.local:3128"
    assert proxy_for("http://api.example.com/v1") is None  # no proxy named for http
    assert proxy_for("https://127.0.0.1:8080/v1") is None
