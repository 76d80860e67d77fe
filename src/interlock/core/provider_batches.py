"""The values a provider batch is recorded as: a batch interlock sent (or is about to send)
to a provider's batch API, and each model call waiting in one.

A batch is recorded before it is sent, under a tag interlock chooses and the provider keeps
(OpenAI: the batch's metadata; Anthropic: the prefix of each request's custom_id), so that a
process that dies between sending and recording finds the provider's batch again by its tag
instead of sending it twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class BatchState(StrEnum):
    """Where a provider batch is (persisted)."""

    SUBMITTING = "submitting"  # recorded, maybe sent: look for its tag before sending again
    SUBMITTED = "submitted"  # the provider has it under `provider_batch_id`: poll it
    ENDED = "ended"  # its results were read and handed to its requests
    CANCELLED = "cancelled"  # every request was withdrawn; the provider's batch was cancelled


class RequestState(StrEnum):
    """Where one model call in batch mode is (persisted)."""

    GATHERED = "gathered"  # waiting for the next batch of its alias
    BATCHED = "batched"  # in batch `tag`
    DONE = "done"  # `answer` holds the provider's answer
    FAILED = "failed"  # `error` says why; the attempt failed
    WITHDRAWN = "withdrawn"  # its run was cancelled before the answer came


TERMINAL = frozenset({RequestState.DONE, RequestState.FAILED, RequestState.WITHDRAWN})


@dataclass(frozen=True, kw_only=True)
class ProviderBatch:
    """One batch sent to a provider."""

    tag: str  # interlock's name for it, kept by the provider
    provider: str  # the provider's name in interlock.toml
    kind: str  # openai | anthropic
    alias: str
    state: BatchState
    created_at: float  # UTC epoch seconds it was recorded
    provider_batch_id: str = ""
    provider_status: str = ""  # what the provider said last (validating, in_progress, ...)
    submitted_at: float | None = None
    ended_at: float | None = None
    requests: int = 0


@dataclass(frozen=True, kw_only=True)
class BatchRequest:
    """One model call waiting in batch mode, keyed by the call's idempotency key."""

    key: str  # the call's idempotency key: run, task and attempt
    provider: str
    alias: str
    body: str  # the JSON body sent, as a direct call sends it but for streaming
    state: RequestState
    created_at: float
    run_id: str = ""
    task_id: str = ""
    tag: str = ""  # its batch, once in one
    answer: str = ""  # the provider's answer (JSON), when done
    error: str = ""  # why it failed
    retryable: bool = True  # whether another attempt may succeed
