"""The error of a failed model call, apart from the call's types (`interlock.providers.base`,
which also defines a cancellation and so loads asyncio), so that reading the configuration,
as `interlock check` does, does not load them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interlock.providers.base import ModelResult


class ProviderError(Exception):
    """A call failed. `retryable` tells the engine whether another attempt may succeed.

    Attributes:
        retryable: Whether another attempt may succeed.
        status: The HTTP status, when the server answered with an error.
        retry_after: Seconds the server asked to wait before the next call, if it said.
        answered: What the server fully answered when the answer itself was unusable
            (empty, truncated, filtered): its cost was spent and must be recorded.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
        answered: ModelResult | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.answered = answered

    def with_message(self, message: str) -> ProviderError:
        """The same failure with another message (e.g. with keys masked)."""
        copy = ProviderError(
            message,
            retryable=self.retryable,
            status=self.status,
            retry_after=self.retry_after,
            answered=self.answered,
        )
        return copy
