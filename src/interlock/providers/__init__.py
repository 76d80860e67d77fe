"""Model providers: the adapters that turn a rendered prompt into model output."""

from interlock.providers.base import (
    ModelRequest,
    ModelResult,
    Provider,
    ProviderError,
    ProviderTimeout,
    TokenCallback,
)
from interlock.providers.offline import OfflineProvider

__all__ = [
    "ModelRequest",
    "ModelResult",
    "OfflineProvider",
    "Provider",
    "ProviderError",
    "ProviderTimeout",
    "TokenCallback",
]
