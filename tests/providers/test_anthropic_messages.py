"""The Anthropic provider against a local server speaking the Messages wire format."""

from __future__ import annotations

import pytest

from interlock.providers import ProviderError, ProviderTimeout

from .conftest import API_KEY, RecordingSleep
from .fake_llm_server import FakeServer, Fault
from .helpers import anthropic, request, run


def test_streams_text_deltas_and_returns_the_full_text(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """Each text_delta is forwarded to on_token and the result is returned at message_stop."""
    provider = anthropic(server, sleep)
    fragments: list[str] = []
    result = run(
        provider, lambda: provider.complete(request(model="claude-test"), fragments.append)
    )
    assert fragments == ["Hello", ", ", "world", "."]
    assert result.text == "Hello, world."
    assert result.finish_reason == "end_turn"


def test_sends_the_messages_wire_format(server: FakeServer, sleep: RecordingSleep) -> None:
    """The request carries x-api-key, anthropic-version, a top-level system and max_tokens."""
    provider = anthropic(server, sleep)
    run(provider, lambda: provider.complete(request(model="claude-test", max_output_tokens=1234)))
    (sent,) = server.requests
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == API_KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert sent.body == {
        "model": "claude-test",
        "max_tokens": 1234,
        "system": "You are careful.",
        "messages": [{"role": "user", "content": "Write the plan."}],
        "stream": True,
    }


def test_default_max_tokens_is_always_sent(server: FakeServer, sleep: RecordingSleep) -> None:
    """Without a cap in the request or alias the provider's default max_tokens is sent."""
    provider = anthropic(server, sleep)
    run(provider, lambda: provider.complete(request(model="claude-test")))
    assert server.requests[0].body["max_tokens"] == 8192


def test_reports_usage_and_cost(server: FakeServer, sleep: RecordingSleep) -> None:
    """Input tokens come from message_start, output tokens from message_delta, cost from prices."""
    provider = anthropic(server, sleep)
    result = run(provider, lambda: provider.complete(request(model="claude-test")))
    assert (result.input_tokens, result.output_tokens) == (1000, 500)
    assert result.cost_usd == pytest.approx(0.002 + 0.004)


def test_overloaded_529_is_retried(server: FakeServer, sleep: RecordingSleep) -> None:
    """A 529 overloaded answer is retried with backoff and the next request succeeds."""
    server.fail_next(Fault(status=529))
    provider = anthropic(server, sleep)
    result = run(provider, lambda: provider.complete(request(model="claude-test")))
    assert result.text == "Hello, world."
    assert len(server.requests) == 2 and len(sleep.delays) == 1


def test_rate_limit_honours_retry_after(server: FakeServer, sleep: RecordingSleep) -> None:
    """A 429 rate_limit_error waits the Retry-After seconds before retrying."""
    server.fail_next(Fault(status=429, retry_after="7"))
    provider = anthropic(server, sleep)
    run(provider, lambda: provider.complete(request(model="claude-test", timeout=60)))
    assert sleep.delays == [7.0]


def test_invalid_key_is_a_permanent_error(server: FakeServer, sleep: RecordingSleep) -> None:
    """A 401 authentication_error fails once, not retryable, with Anthropic's message."""
    provider = anthropic(server, sleep, key="sk-ant-wrong-000000")
    with pytest.raises(ProviderError) as caught:
        run(provider, lambda: provider.complete(request(model="claude-test")))
    assert not caught.value.retryable and caught.value.status == 401
    assert "invalid x-api-key (authentication_error)" in str(caught.value)
    assert len(server.requests) == 1


def test_unknown_model_is_a_permanent_error(server: FakeServer, sleep: RecordingSleep) -> None:
    """A 404 not_found_error for the model fails once and names the model."""
    provider = anthropic(server, sleep)
    with pytest.raises(ProviderError, match="model: claude-nope") as caught:
        run(provider, lambda: provider.complete(request(model="claude-nope")))
    assert not caught.value.retryable and caught.value.status == 404


def test_truncated_stream_without_message_stop_fails(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """A stream that ends before message_stop is a retryable error, never a partial result."""
    server.fail_next(Fault(truncate=True))
    provider = anthropic(server, sleep)
    with pytest.raises(ProviderError, match="truncated") as caught:
        run(provider, lambda: provider.complete(request(model="claude-test")))
    assert caught.value.retryable


def test_error_event_in_the_stream_fails_the_call(
    server: FakeServer, sleep: RecordingSleep
) -> None:
    """An `error` event (overloaded) mid-stream fails the call as retryable."""
    server.fail_next(Fault(stream_error=True))
    provider = anthropic(server, sleep)
    with pytest.raises(ProviderError, match="Overloaded") as caught:
        run(provider, lambda: provider.complete(request(model="claude-test")))
    assert caught.value.retryable


def test_slow_answer_is_a_timeout(server: FakeServer, sleep: RecordingSleep) -> None:
    """No answer within the request's timeout raises ProviderTimeout."""
    server.fail_next(Fault(delay=5))
    provider = anthropic(server, sleep)
    with pytest.raises(ProviderTimeout):
        run(provider, lambda: provider.complete(request(model="claude-test", timeout=0.3)))
