"""Small builders shared by the provider tests."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from interlock.providers import (
    AnthropicProvider,
    HttpEndpoint,
    ModelRequest,
    OpenAIChatProvider,
    ProviderLimiter,
    ResolvedModel,
    RetryPolicy,
    Secret,
)
from interlock.providers.retry import SleepFn

from .conftest import API_KEY
from .fake_llm_server import FakeServer

T = TypeVar("T")


def request(**overrides: Any) -> ModelRequest:
    """A model request with sensible test values."""
    fields: dict[str, Any] = {
        "alias": "main",
        "model": "gpt-test",
        "system": "You are careful.",
        "prompt": "Write the plan.",
        "timeout": 5.0,
        "idempotency_key": "run-1/task-a/attempt-1",
    }
    fields.update(overrides)
    return ModelRequest(**fields)


def endpoint(
    server: FakeServer, sleep: SleepFn, *, base: str = "/v1", **retry: Any
) -> HttpEndpoint:
    """An endpoint on the fake server with a seeded jitter and a non-waiting sleep."""
    policy = RetryPolicy(sleep=sleep, rng=random.Random(7), **retry)
    return HttpEndpoint(
        name="fake",
        base_url=server.url + base,
        limiter=ProviderLimiter(max_concurrency=4),
        retry=policy,
    )


def resolved(kind: str = "openai", model: str = "gpt-test", **fields: Any) -> ResolvedModel:
    """A resolved alias with prices of 2 and 8 USD per million tokens."""
    values: dict[str, Any] = {
        "alias": "main",
        "provider": "fake",
        "kind": kind,
        "model": model,
        "input_price_per_mtok": 2.0,
        "output_price_per_mtok": 8.0,
    }
    values.update(fields)
    return ResolvedModel(**values)


def openai(
    server: FakeServer, sleep: SleepFn, *, key: str | None = API_KEY, **retry: Any
) -> OpenAIChatProvider:
    """An OpenAI-compatible provider pointed at the fake server."""
    return OpenAIChatProvider(
        endpoint=endpoint(server, sleep, **retry),
        resolved=resolved(),
        api_key=Secret(key) if key else None,
    )


def anthropic(
    server: FakeServer, sleep: SleepFn, *, key: str = API_KEY, **retry: Any
) -> AnthropicProvider:
    """An Anthropic provider pointed at the fake server."""
    return AnthropicProvider(
        endpoint=endpoint(server, sleep, base="", **retry),
        resolved=resolved("anthropic", "claude-test"),
        api_key=Secret(key),
    )


def run(provider: OpenAIChatProvider | AnthropicProvider, body: Callable[[], Awaitable[T]]) -> T:
    """Run `body` in a fresh event loop and close the provider's HTTP client afterwards."""
    import asyncio

    async def main() -> T:
        try:
            return await body()
        finally:
            await provider._endpoint.pool.aclose()

    return asyncio.run(main())
