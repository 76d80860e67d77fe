"""The OpenAI-compatible provider against a local server speaking the real wire format."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from interlock.providers import (
    HttpEndpoint,
    ModelResult,
    OpenAIChatProvider,
    ProviderError,
    ProviderLimiter,
    ProviderTimeout,
    RetryPolicy,
)

from .conftest import API_KEY, RecordingSleep
from .fake_llm_server import FakeServer, Fault
from .helpers import openai, request, resolved, run


def test_streams_fragments_and_returns_the_full_text(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A streamed completion forwards each fragment to on_token and returns the joined text."""
    provider = openai(server, sleep)
    fragments: list[str] = []
    result = run(provider, lambda: provider.complete(request(), fragments.append))
    assert fragments == ["Hello", ", ", "world", "."]
    assert result.text == "Hello, world."
    assert result.finish_reason == "stop"
    assert result.provider == "fake" and result.model == "gpt-test"


def test_sends_the_chat_completions_wire_format(server: FakeServer, sleep: RecordingSleep) -> None:
    """The request carries the bearer key, both messages, the stream flags and the output cap."""
    provider = openai(server, sleep)
    run(provider, lambda: provider.complete(request(max_output_tokens=300)))
    (sent,) = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["accept"] == "text/event-stream"
    assert sent.headers["idempotency-key"] == "run-1/task-a/attempt-1"
    assert sent.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You are careful."},
            {"role": "user", "content": "Write the plan."},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 300,
    }


def test_local_server_without_key_gets_no_auth_header(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A provider configured without a key (e.g. Ollama) sends no Authorization header."""
    server.state.api_key = ""
    provider = openai(server, sleep, key=None)
    run(provider, lambda: provider.complete(request(system="")))
    (sent,) = server.requests
    assert "authorization" not in sent.headers
    assert [m["role"] for m in sent.body["messages"]] == ["user"]


def test_reports_usage_and_cost(server: FakeServer, sleep: RecordingSleep) -> None:
    """Token counts come from the usage chunk and cost from the alias's per-million prices."""
    provider = openai(server, sleep)
    result: ModelResult = run(provider, lambda: provider.complete(request()))
    assert (result.input_tokens, result.output_tokens) == (1000, 500)
    assert result.cost_usd == pytest.approx(1000 * 2.0 / 1e6 + 500 * 8.0 / 1e6)
    assert "usage" not in result.extra


def test_estimates_usage_when_the_server_reports_none(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """Without a usage chunk the counts are estimated and marked as such."""
    server.fail_next(Fault(no_usage=True))
    provider = openai(server, sleep)
    result = run(provider, lambda: provider.complete(request()))
    assert result.extra["usage"] == "estimated"
    assert result.input_tokens > 0 and result.output_tokens > 0


def test_retries_429_honouring_retry_after_seconds(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A 429 with Retry-After: 3 waits exactly 3 seconds, then the retry succeeds."""
    server.fail_next(Fault(status=429, retry_after="3"))
    provider = openai(server, sleep)
    result = run(provider, lambda: provider.complete(request()))
    assert result.text == "Hello, world."
    assert len(server.requests) == 2
    assert sleep.delays == [3.0]


def test_retries_429_honouring_retry_after_http_date(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A Retry-After given as an HTTP date waits until that date."""
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    server.fail_next(Fault(status=429, retry_after=when))
    provider = openai(server, sleep)
    run(provider, lambda: provider.complete(request(timeout=120)))
    (delay,) = sleep.delays
    assert 25 <= delay <= 30


def test_retries_5xx_with_capped_exponential_backoff(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """Server errors are retried with growing, capped, jittered delays until success."""
    server.fail_next(*[Fault(status=500)] * 4)
    provider = openai(server, sleep, max_attempts=5, base_delay_s=1.0, max_delay_s=3.0)
    result = run(provider, lambda: provider.complete(request()))
    assert result.text == "Hello, world."
    assert len(server.requests) == 5
    ceilings = [1.0, 2.0, 3.0, 3.0]
    for delay, ceiling in zip(sleep.delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling


def test_gives_up_after_max_attempts_with_a_retryable_error(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """When every attempt gets a 503 the call fails as retryable after max_attempts requests."""
    server.fail_next(*[Fault(status=503)] * 3)
    provider = openai(server, sleep, max_attempts=3)
    with pytest.raises(ProviderError) as caught:
        run(provider, lambda: provider.complete(request()))
    assert caught.value.retryable and caught.value.status == 503
    assert "The server had an error" in str(caught.value)
    assert len(server.requests) == 3


def test_too_long_retry_after_returns_to_the_engine(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A Retry-After above max_retry_after_s ends the call (retryable) instead of sleeping."""
    server.fail_next(Fault(status=429, retry_after="600"))
    provider = openai(server, sleep, max_retry_after_s=60)
    with pytest.raises(ProviderError, match="asked to wait 600s") as caught:
        run(provider, lambda: provider.complete(request()))
    assert caught.value.retryable and sleep.delays == []


def test_invalid_key_is_not_retried_and_keeps_the_provider_message(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A 401 fails at once, not retryable, with the provider's own explanation."""
    provider = openai(server, sleep, key="wrong-key-abcdefgh")
    with pytest.raises(ProviderError) as caught:
        run(provider, lambda: provider.complete(request()))
    assert not caught.value.retryable and caught.value.status == 401
    assert "Incorrect API key provided" in str(caught.value)
    assert "invalid_request_error" in str(caught.value)
    assert len(server.requests) == 1 and sleep.delays == []


def test_unknown_model_is_not_retried(server: FakeServer, sleep: RecordingSleep) -> None:
    """A 404 for an unknown model fails at once and names the model."""
    provider = openai(server, sleep)
    with pytest.raises(ProviderError) as caught:
        run(provider, lambda: provider.complete(request(model="gpt-nope")))
    assert not caught.value.retryable and caught.value.status == 404
    assert "The model `gpt-nope` does not exist" in str(caught.value)


def test_slow_server_raises_provider_timeout(server: FakeServer, sleep: RecordingSleep) -> None:
    """A server that does not answer within the request timeout gives ProviderTimeout."""
    server.fail_next(Fault(delay=5))
    provider = openai(server, sleep)
    with pytest.raises(ProviderTimeout) as caught:
        run(provider, lambda: provider.complete(request(timeout=0.3)))
    assert caught.value.retryable


def test_stalled_stream_raises_provider_timeout(server: FakeServer, sleep: RecordingSleep) -> None:
    """The timeout covers the whole call, including a stream that stops mid-way."""
    server.fail_next(Fault(stall=5))
    provider = openai(server, sleep)
    with pytest.raises(ProviderTimeout):
        run(provider, lambda: provider.complete(request(timeout=0.5)))


def test_truncated_stream_is_a_retryable_error_not_a_partial_result(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A stream cut before finish_reason raises a retryable error and is not retried in place."""
    server.fail_next(Fault(truncate=True))
    provider = openai(server, sleep)
    fragments: list[str] = []
    with pytest.raises(ProviderError, match="truncated") as caught:
        run(provider, lambda: provider.complete(request(), fragments.append))
    assert caught.value.retryable
    assert fragments == ["Hello", ", "]
    assert len(server.requests) == 1


def test_error_inside_the_stream_is_retryable(server: FakeServer, sleep: RecordingSleep) -> None:
    """An error object sent mid-stream fails the call as retryable."""
    server.fail_next(Fault(stream_error=True))
    provider = openai(server, sleep)
    with pytest.raises(ProviderError, match="error during the stream") as caught:
        run(provider, lambda: provider.complete(request()))
    assert caught.value.retryable


def test_refused_connection_is_retried_then_reported(sleep: RecordingSleep) -> None:
    """A server that is not listening is retried and then reported as retryable."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends
    closed = HttpEndpoint(
        name="fake",
        base_url=f"http://127.0.0.1:{port}/v1",
        limiter=ProviderLimiter(),
        retry=RetryPolicy(max_attempts=2, sleep=sleep),
    )
    provider = OpenAIChatProvider(endpoint=closed, resolved=resolved(), api_key=None)
    with pytest.raises(ProviderError, match=r"connection to .* failed") as caught:
        run(provider, lambda: provider.complete(request()))
    assert caught.value.retryable and len(sleep.delays) == 1


def test_gives_up_when_the_wait_would_pass_the_timeout(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A Retry-After longer than the time left in the call is not waited for."""
    server.fail_next(Fault(status=429, retry_after="30"))
    provider = openai(server, sleep)
    with pytest.raises(ProviderError, match="would pass the call's timeout") as caught:
        run(provider, lambda: provider.complete(request(timeout=5)))
    assert caught.value.retryable and caught.value.status == 429 and sleep.delays == []
