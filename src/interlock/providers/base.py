"""The provider contract every model backend implements.

A provider receives a fully assembled prompt and returns the complete text plus accounting.
It never sees run state: retries across attempts, fallbacks and budgets are decided by the
engine; a provider only retries transport-level failures inside one attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from interlock.core.params import RequestSettings
from interlock.providers.failures import ProviderError as ProviderError

if TYPE_CHECKING:
    from interlock.providers.attachments import Attachment

TokenCallback = Callable[[str], None]
"""Called with each streamed text fragment, in order, as progress (never as the output)."""


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """A tool the model may call, as its server described it."""

    name: str
    description: str
    input_schema: dict[str, Any]  # JSON Schema of the arguments


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One call the model asked for."""

    id: str  # the provider's id, echoed with the result
    name: str
    arguments: str  # the JSON text the model wrote (not necessarily valid)


@dataclass(frozen=True, kw_only=True)
class ToolResult:
    """What one tool call gave back to the model."""

    call_id: str
    content: str
    is_error: bool = False


@dataclass(frozen=True, kw_only=True)
class ToolTurn:
    """An earlier turn of a tool loop: what the model said and asked, and the answers."""

    text: str
    calls: tuple[ToolCall, ...]
    results: tuple[ToolResult, ...]
    thinking: tuple[dict[str, Any], ...] = ()  # Anthropic thinking blocks, sent back as given


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """One model call, exactly as it will be sent."""

    alias: str  # the name used in the workflow file, e.g. "sonnet"
    model: str  # the provider's model id the alias resolved to
    system: str
    prompt: str
    timeout: float  # seconds for the whole call
    idempotency_key: str  # derived from run, task and attempt
    max_output_tokens: int | None = None
    settings: RequestSettings = field(default_factory=RequestSettings)
    # The JSON Schema to ask for as the provider's native structured output, when any.
    response_schema: dict[str, Any] | None = None
    schema_name: str = "output"
    attachments: tuple[Attachment, ...] = ()  # images and PDFs sent beside the prompt
    tools: tuple[ToolSpec, ...] = ()  # offered to the model
    turns: tuple[ToolTurn, ...] = ()  # the tool loop so far, after the prompt
    # The run's pipeline, for spend caps scoped to one ("" when the caller does not say).
    pipeline: str = ""
    # The run and task it is for, when the caller says (batch mode records them).
    run_id: str = ""
    task_id: str = ""


@dataclass(frozen=True, kw_only=True)
class ModelResult:
    """What a call produced and what it cost."""

    text: str
    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    cost_usd: float
    finish_reason: str
    extra: dict[str, str] = field(default_factory=dict)
    # Parts of the totals above that are priced apart (see `interlock.providers.usage`).
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    tool_calls: tuple[ToolCall, ...] = ()  # what the model asked to call instead of finishing
    # Anthropic's thinking blocks of the answer: a tool turn must send them back unchanged.
    thinking: tuple[dict[str, Any], ...] = ()


class CallStopped(asyncio.CancelledError):
    """The call was cancelled after the server had begun answering.

    Still a cancellation (it propagates as one), carrying what had arrived: `answered` has
    the tokens the server reported, or estimates of them, and their cost, so the spend of
    a call stopped because its run ended is recorded all the same.
    """

    def __init__(self, answered: ModelResult) -> None:
        super().__init__("the call was stopped while the model was answering")
        self.answered = answered


class ProviderTimeout(ProviderError):
    """The provider did not answer within the request's timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True)


class Provider(Protocol):
    """A model backend. Implementations must be safe to call concurrently."""

    name: str

    async def complete(
        self, request: ModelRequest, on_token: TokenCallback | None = None
    ) -> ModelResult:
        """Run one call to completion; stream fragments to `on_token` when given."""
        ...
