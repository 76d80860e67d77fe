"""Building a `Provider` for a resolved alias, sharing clients and limits per provider.

Every alias served by the same provider name shares one connection pool and one limiter in
the process, so a fan-out of many tasks over several aliases of one provider still respects
that provider's concurrency and per-minute limits. The per-minute buckets live in the
registry's `BucketStore`: this process's memory unless `share_limits` was given a shared
one (a fleet worker on PostgreSQL or Redis), whose buckets every process obeys together.

The HTTP providers and their transport (aiohttp) are imported by the first provider that
needs them, so that a pipeline whose models run offline or as command-line agents starts
without loading them.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from interlock.providers.base import Provider
from interlock.providers.buckets import BucketStore, MemoryBuckets, key_digest
from interlock.providers.cli_agent import CliAgentProvider
from interlock.providers.config import ModelConfig
from interlock.providers.limits import Clock, ProviderLimiter
from interlock.providers.offline import OfflineProvider
from interlock.providers.redaction import Secret
from interlock.providers.retry import RetryPolicy, SleepFn
from interlock.providers.settings import ProviderSettings, ResolvedModel

if TYPE_CHECKING:
    from interlock.providers.spend_guard import LiveLimits
    from interlock.providers.transport import HttpEndpoint


@dataclass
class _Shared:
    settings: ProviderSettings
    key: str
    store: BucketStore
    limiter: ProviderLimiter
    endpoint: HttpEndpoint | None


class ProviderRegistry:
    """Holds one endpoint and limiter per provider name.

    Args:
        sleep: Used for backoff and rate-limit waits (tests inject a fast one).
        clock: Monotonic clock of the rate limiters.
        rng: Jitter source.
        store: Where the per-minute buckets live (default: this process's memory).
    """

    def __init__(
        self,
        *,
        sleep: SleepFn = asyncio.sleep,
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
        store: BucketStore | None = None,
    ) -> None:
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()
        self._shared: dict[str, _Shared] = {}
        self._caps: dict[str, LiveLimits] = {}  # [limits] by the file they are read from
        self._collectors: dict[tuple[object, ...], object] = {}  # batch mode, per alias and loop
        self.store: BucketStore = store or MemoryBuckets(clock=clock)

    def share_limits(self, store: BucketStore) -> BucketStore:
        """Keep the per-minute buckets in `store` from now on (limiters are built anew);
        returns the store used until now, which the caller closes or puts back."""
        previous, self.store = self.store, store
        return previous

    def _shared_for(self, settings: ProviderSettings, api_key: Secret | None) -> _Shared:
        # The buckets are named by the endpoint and key, never the key itself.
        key = key_digest(base_url=settings.base_url or f"{settings.kind}:{settings.name}",
                         key=api_key)  # fmt: skip
        shared = self._shared.get(settings.name)
        if (
            shared is not None
            and shared.settings == settings
            and shared.key == key
            and shared.store is self.store
        ):
            return shared
        limiter = ProviderLimiter(
            max_concurrency=settings.max_concurrency,
            requests_per_minute=settings.requests_per_minute,
            tokens_per_minute=settings.tokens_per_minute,
            clock=self._clock,
            sleep=self._sleep,
            store=self.store,
            key=key,
            per_model=settings.limits_per_model,
        )
        endpoint = None
        if settings.base_url is not None and settings.kind in ("openai", "anthropic"):
            from interlock.providers.transport import ClientPool, HttpEndpoint

            retry = RetryPolicy(
                max_attempts=settings.max_attempts,
                base_delay_s=settings.backoff_base_s,
                max_delay_s=settings.backoff_cap_s,
                max_retry_after_s=settings.max_retry_after_s,
                sleep=self._sleep,
                rng=self._rng,
            )
            endpoint = HttpEndpoint(
                name=settings.name,
                base_url=settings.base_url,
                limiter=limiter,
                retry=retry,
                pool=ClientPool(max_connections=settings.max_concurrency),
            )
        # A changed configuration for the same name replaces the old pool and limiter.
        shared = _Shared(
            settings=settings, key=key, store=self.store, limiter=limiter, endpoint=endpoint
        )
        self._shared[settings.name] = shared
        return shared

    def build(self, resolved: ResolvedModel, config: ModelConfig) -> Provider:
        """A provider object for `resolved`, sharing the pool and limits of its provider,
        its calls held to the spend caps of `config` (`interlock.providers.spend_guard`).

        Raises:
            MissingKeyError: The provider needs a key that is not available.
        """
        provider = self._build(resolved, config)
        if resolved.batch is not None and resolved.kind in ("openai", "anthropic"):
            from interlock.providers.batch_wiring import batching

            provider = batching(provider, resolved, config, self._collectors)
        if not config.spend.caps or resolved.kind not in ("openai", "anthropic"):
            return provider
        from interlock.providers.spend_guard import CappedProvider, LiveLimits

        live = self._caps.get(config.spend.source)
        if live is None:
            # One per file: it notices the file's changes once, for every alias.
            live = self._caps[config.spend.source] = LiveLimits(config.spend)
        settings = config.provider(resolved.provider)
        default = settings.default_max_output_tokens if resolved.kind == "anthropic" else None
        return CappedProvider(
            inner=provider,
            resolved=resolved,
            limits=live,
            default_output=default,
            sleep=self._sleep,
            secrets=config.secrets,
        )

    def _build(self, resolved: ResolvedModel, config: ModelConfig) -> Provider:
        if resolved.kind == "offline":
            return OfflineProvider()
        settings = config.provider(resolved.provider)
        if resolved.kind == "cli":
            shared = self._shared_for(settings, None)
            return CliAgentProvider(
                name=settings.name,
                command=settings.command,
                resolved=resolved,
                limiter=shared.limiter,
                cwd=settings.cwd,
                kill_grace_s=settings.kill_grace_s,
                env=config.agent_env(settings),
            )
        api_key = config.api_key(resolved)
        shared = self._shared_for(settings, api_key)
        assert shared.endpoint is not None  # settings validation requires base_url
        if resolved.kind == "anthropic":
            from interlock.providers.anthropic_messages import AnthropicProvider

            return AnthropicProvider(
                endpoint=shared.endpoint,
                resolved=resolved,
                api_key=api_key,
                anthropic_version=settings.anthropic_version,
                default_max_output_tokens=settings.default_max_output_tokens,
            )
        from interlock.providers.openai_chat import OpenAIChatProvider

        return OpenAIChatProvider(
            endpoint=shared.endpoint,
            resolved=resolved,
            api_key=api_key,
            max_tokens_field=settings.max_tokens_field,
        )

    async def aclose(self) -> None:
        """Close the HTTP clients opened on the running event loop."""
        for shared in self._shared.values():
            if shared.endpoint is not None:
                await shared.endpoint.pool.aclose()


_default_registry = ProviderRegistry()


def build_provider(resolved: ResolvedModel, config: ModelConfig) -> Provider:
    """A provider for `resolved`, reusing the process-wide client and limiter of its provider.

    Args:
        resolved: From `ModelConfig.resolve(alias)`.
        config: The configuration `resolved` came from (for provider settings and keys).

    Raises:
        MissingKeyError: The provider needs a key that is not available.
    """
    return _default_registry.build(resolved, config)


def share_limits(store: BucketStore) -> BucketStore:
    """Keep this process's per-minute rate limits in `store` (from
    `interlock.runtime.shared_limits.open_buckets`): a fleet worker shares them with every process
    on the same PostgreSQL database or Redis server. Returns the store used until now."""
    return _default_registry.share_limits(store)


async def aclose_providers() -> None:
    """Close the process-wide HTTP clients; call once when a run ends."""
    await _default_registry.aclose()
