"""Building providers from configuration and sharing clients and limits per provider."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from interlock.providers import (
    AnthropicProvider,
    CliAgentProvider,
    MissingKeyError,
    ModelConfig,
    OfflineProvider,
    OpenAIChatProvider,
    ProviderRegistry,
    aclose_providers,
    build_provider,
)

from .conftest import API_KEY, RecordingSleep
from .fake_llm_server import FakeServer, Fault
from .helpers import request

SCRIPT = Path(__file__).with_name("agent_script.py")


def config_for(server: FakeServer, tmp_path: Path, *, concurrency: int = 2) -> ModelConfig:
    """A configuration with two aliases on one OpenAI-compatible provider, plus others."""
    (tmp_path / "interlock.toml").write_text(
        f"""
[providers.fake]
kind = "openai"
base_url = "{server.url}/v1"
api_key_env = "FAKE_KEY"
max_concurrency = {concurrency}
max_attempts = 3

[providers.fake-claude]
kind = "anthropic"
base_url = "{server.url}"
api_key_env = "FAKE_KEY"

[providers.script]
kind = "cli"
command = [{str(sys.executable)!r}, {str(SCRIPT)!r}, "report", "{{prompt}}"]

[models.a]
provider = "fake"
model = "gpt-test"
input_price_per_mtok = 1.0
output_price_per_mtok = 2.0

[models.b]
provider = "fake"
model = "gpt-test"
input_price_per_mtok = 10.0
output_price_per_mtok = 20.0

[models.c]
provider = "fake-claude"
model = "claude-test"

[models.d]
provider = "script"

[models.e]
provider = "offline"
""".replace("'", '"'),
        encoding="utf-8",
    )
    return ModelConfig.load([tmp_path], env={"FAKE_KEY": API_KEY})


def test_builds_the_client_matching_each_kind(server: FakeServer, tmp_path: Path) -> None:
    """Each kind yields its provider class, named after the configured provider."""
    config = config_for(server, tmp_path)
    registry = ProviderRegistry()
    built = {alias: registry.build(config.resolve(alias), config) for alias in "acde"}
    assert isinstance(built["a"], OpenAIChatProvider) and built["a"].name == "fake"
    assert isinstance(built["c"], AnthropicProvider) and built["c"].name == "fake-claude"
    assert isinstance(built["d"], CliAgentProvider) and built["d"].name == "script"
    assert isinstance(built["e"], OfflineProvider)


def test_aliases_of_one_provider_share_pool_and_limiter(server: FakeServer, tmp_path: Path) -> None:
    """Two aliases on the same provider share one endpoint, yet each is priced on its own."""
    config = config_for(server, tmp_path)
    registry = ProviderRegistry()
    a = registry.build(config.resolve("a"), config)
    b = registry.build(config.resolve("b"), config)
    assert isinstance(a, OpenAIChatProvider) and isinstance(b, OpenAIChatProvider)
    assert a._endpoint is b._endpoint

    async def main() -> tuple[float, float]:
        try:
            first = await a.complete(request(alias="a"))
            second = await b.complete(request(alias="b"))
            return first.cost_usd, second.cost_usd
        finally:
            await registry.aclose()

    cost_a, cost_b = asyncio.run(main())
    assert cost_a == pytest.approx((1000 * 1.0 + 500 * 2.0) / 1e6)
    assert cost_b == pytest.approx(10 * cost_a)


def test_fan_out_respects_max_concurrency_at_the_server(
    server: FakeServer, tmp_path: Path, sleep: RecordingSleep
) -> None:
    """Twenty calls over two aliases of one provider never exceed its max_concurrency."""
    config = config_for(server, tmp_path, concurrency=2)
    server.fail_next(*[Fault(delay=0.05)] * 20)
    registry = ProviderRegistry(sleep=sleep)
    providers = [registry.build(config.resolve(alias), config) for alias in ("a", "b")]

    async def main() -> list[str]:
        try:
            calls = [providers[i % 2].complete(request()) for i in range(20)]
            return [result.text for result in await asyncio.gather(*calls)]
        finally:
            await registry.aclose()

    assert asyncio.run(main()) == ["Hello, world."] * 20
    assert server.state.max_in_flight == 2


def test_missing_key_is_reported_when_building(server: FakeServer, tmp_path: Path) -> None:
    """Building a provider whose key is missing raises MissingKeyError before any call."""
    config_for(server, tmp_path)
    config = ModelConfig.load([tmp_path], env={})
    with pytest.raises(MissingKeyError, match="FAKE_KEY"):
        ProviderRegistry().build(config.resolve("a"), config)


def test_changed_settings_replace_the_shared_endpoint(server: FakeServer, tmp_path: Path) -> None:
    """Reloading a changed configuration for the same provider name builds a fresh endpoint."""
    registry = ProviderRegistry()
    first_config = config_for(server, tmp_path, concurrency=2)
    first = registry.build(first_config.resolve("a"), first_config)
    second_config = config_for(server, tmp_path, concurrency=5)
    second = registry.build(second_config.resolve("a"), second_config)
    assert isinstance(first, OpenAIChatProvider) and isinstance(second, OpenAIChatProvider)
    assert first._endpoint is not second._endpoint
    assert second._endpoint.limiter.max_concurrency == 5


def test_process_wide_builder_calls_the_server_and_closes(
    server: FakeServer, tmp_path: Path
) -> None:
    """build_provider works end to end and aclose_providers closes its clients."""
    config = config_for(server, tmp_path)

    async def main() -> str:
        try:
            provider = build_provider(config.resolve("c"), config)
            return (await provider.complete(request(model="claude-test"))).text
        finally:
            await aclose_providers()

    assert asyncio.run(main()) == "Hello, world."
    assert server.requests[0].headers["x-api-key"] == API_KEY


def test_offline_fallback_builds_the_offline_provider(tmp_path: Path) -> None:
    """Without any configuration the built provider is the offline one."""
    config = ModelConfig.load([tmp_path], env={})
    resolved = config.resolve("writer")
    assert resolved.offline_fallback
    assert isinstance(build_provider(resolved, config), OfflineProvider)
