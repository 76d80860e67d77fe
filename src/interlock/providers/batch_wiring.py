"""Building batch mode for an alias (`interlock.providers.factory` calls `batching`)."""

from __future__ import annotations

import asyncio
from typing import Any

from interlock.providers.base import Provider
from interlock.providers.batch_api import AnthropicBatches, BatchApi, OpenAIBatches
from interlock.providers.batch_provider import BatchBackend, BatchingProvider, Collector
from interlock.providers.batch_store import batch_store
from interlock.providers.config import ModelConfig
from interlock.providers.settings import ResolvedModel


def batching(
    provider: Provider, resolved: ResolvedModel, config: ModelConfig, collectors: dict[Any, Any]
) -> Provider:
    """`provider` (a direct OpenAI or Anthropic one) with its calls sent in batches. One
    collector per alias, event loop and store, shared by every provider object of the alias."""
    assert resolved.batch is not None
    settings = config.provider(resolved.provider)
    api_key = config.api_key(resolved)
    inner: BatchBackend = provider  # type: ignore[assignment]  # the HTTP providers are
    endpoint = inner._endpoint  # type: ignore[attr-defined]
    mode = resolved.batch

    def collector() -> Collector:
        store = batch_store()
        key = (settings.name, resolved.alias, asyncio.get_running_loop(), store)
        found = collectors.get(key)
        if found is None:
            session = endpoint.pool.get()
            api: BatchApi
            if settings.kind == "anthropic":
                api = AnthropicBatches(session=session, base_url=settings.base_url or "",
                                       api_key=api_key, name=settings.name,
                                       version=settings.anthropic_version)  # fmt: skip
            else:
                api = OpenAIBatches(session=session, base_url=settings.base_url or "",
                                    api_key=api_key, name=settings.name)  # fmt: skip
            found = collectors[key] = Collector(provider=settings.name, kind=settings.kind,
                                                alias=resolved.alias, mode=mode, api=api,
                                                store=store)  # fmt: skip
        assert isinstance(found, Collector)
        return found

    return BatchingProvider(inner=inner, collector=collector)
