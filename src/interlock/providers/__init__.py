"""Model providers: the adapters that turn a rendered prompt into model output."""

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
]
