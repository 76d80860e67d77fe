"""Whether a complete answer may count as the worker's output.

A stream that finished is not yet a usable answer: it may be empty, cut off at the output
limit, or withheld by a content filter. Each of these is a failed attempt (its cost was
spent and is recorded), so that the worker's `retries` and `fallback_models` come into play
instead of an empty or partial document being delivered as done.
"""

from __future__ import annotations

from interlock.providers.base import ModelResult, ProviderError

# finish_reason / stop_reason values meaning the output limit cut the answer short:
# OpenAI-compatible "length", Anthropic "max_tokens" and "model_context_window_exceeded".
TRUNCATED = frozenset({"length", "max_tokens", "model_context_window_exceeded"})
# ...and meaning the answer was withheld: OpenAI "content_filter", Anthropic "refusal",
# Gemini-compatible servers "safety".
FILTERED = frozenset({"content_filter", "refusal", "safety"})


def judge(result: ModelResult, *, accept_truncated: bool = False) -> ProviderError | None:
    """The failure `result` amounts to, or None when it is a usable answer.

    Args:
        result: A call that finished.
        accept_truncated: The worker accepts answers cut off at the output limit.

    Returns:
        A failure carrying `result` (so its cost is recorded): retryable for an empty or a
        truncated answer (sampling differs from one attempt to the next), not retryable for
        a filtered one (the engine goes on to the next fallback model).
    """
    reason = (result.finish_reason or "").lower()
    where = f"{result.provider}: model {result.model!r}"
    if reason in FILTERED:
        return ProviderError(
            f"{where} stopped with finish_reason {result.finish_reason!r}: the answer was "
            "withheld by the provider's content filter; the output was discarded",
            retryable=False,
            answered=result,
        )
    if reason in TRUNCATED and not accept_truncated:
        return ProviderError(
            f"{where} stopped with finish_reason {result.finish_reason!r}: the answer was "
            f"truncated at the output limit ({result.output_tokens} output tokens); the "
            "output was discarded. Raise max_output_tokens in interlock.toml, or set "
            "accept_truncated: true on the worker to keep truncated answers",
            retryable=True,
            answered=result,
        )
    if not result.text.strip():
        return ProviderError(
            f"{where} answered with an empty completion (finish_reason "
            f"{result.finish_reason!r}); an empty answer is never an output",
            retryable=True,
            answered=result,
        )
    return None
