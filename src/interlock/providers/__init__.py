"""Model providers: the adapters that turn a rendered prompt into model output.

The names of this package are imported from their modules when first used, so that
importing one provider module does not import them all: the HTTP providers bring aiohttp
(about 90 ms to import), which a pipeline whose models run offline or as command-line
agents never needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each name -> the module of this package that defines it.
_WHERE = {
    "AnthropicProvider": "anthropic_messages",
    "CallStopped": "base",
    "CliAgentProvider": "cli_agent",
    "ConfigError": "config",
    "ContextTooLarge": "prompt",
    "HttpEndpoint": "transport",
    "MissingKeyError": "config",
    "ModelConfig": "config",
    "ModelRequest": "base",
    "ModelResult": "base",
    "OfflineProvider": "offline",
    "OpenAIChatProvider": "openai_chat",
    "Provider": "base",
    "ProviderError": "base",
    "ProviderLimiter": "limits",
    "ProviderRegistry": "factory",
    "ProviderSettings": "settings",
    "ProviderTimeout": "base",
    "ResolvedModel": "settings",
    "RetryPolicy": "retry",
    "Secret": "redaction",
    "TokenBucket": "limits",
    "TokenCallback": "base",
    "UnknownModelError": "config",
    "aclose_providers": "factory",
    "assemble_prompt": "prompt",
    "build_provider": "factory",
    "check_context": "prompt",
    "estimate_tokens": "prompt",
    "parse_retry_after": "retry",
    "redact": "redaction",
}
__all__ = [
    "AnthropicProvider",
    "CallStopped",
    "CliAgentProvider",
    "ConfigError",
    "ContextTooLarge",
    "HttpEndpoint",
    "MissingKeyError",
    "ModelConfig",
    "ModelRequest",
    "ModelResult",
    "OfflineProvider",
    "OpenAIChatProvider",
    "Provider",
    "ProviderError",
    "ProviderLimiter",
    "ProviderRegistry",
    "ProviderSettings",
    "ProviderTimeout",
    "ResolvedModel",
    "RetryPolicy",
    "Secret",
    "TokenBucket",
    "TokenCallback",
    "UnknownModelError",
    "aclose_providers",
    "assemble_prompt",
    "build_provider",
    "check_context",
    "estimate_tokens",
    "parse_retry_after",
    "redact",
]  # the names of `_WHERE` (tests/providers/test_package.py)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found once; later lookups do not come here
    return value


if TYPE_CHECKING:
    from interlock.providers.anthropic_messages import AnthropicProvider
    from interlock.providers.base import (
        CallStopped,
        ModelRequest,
        ModelResult,
        Provider,
        ProviderError,
        ProviderTimeout,
        TokenCallback,
    )
    from interlock.providers.cli_agent import CliAgentProvider
    from interlock.providers.config import (
        ConfigError,
        MissingKeyError,
        ModelConfig,
        UnknownModelError,
    )
    from interlock.providers.factory import ProviderRegistry, aclose_providers, build_provider
    from interlock.providers.limits import ProviderLimiter, TokenBucket
    from interlock.providers.offline import OfflineProvider
    from interlock.providers.openai_chat import OpenAIChatProvider
    from interlock.providers.prompt import (
        ContextTooLarge,
        assemble_prompt,
        check_context,
        estimate_tokens,
    )
    from interlock.providers.redaction import Secret, redact
    from interlock.providers.retry import RetryPolicy, parse_retry_after
    from interlock.providers.settings import ProviderSettings, ResolvedModel
    from interlock.providers.transport import HttpEndpoint
