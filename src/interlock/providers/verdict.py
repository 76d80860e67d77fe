"""Whether a complete answer may count as the worker's output.

A stream that finished is not yet a usable answer: it may be empty, cut off at the output
limit, or withheld by a content filter. Each of these is a failed attempt (its cost was
spent and is recorded), so that the worker's `retries` and `fallback_models` come into play
instead of an empty or partial document being delivered as done.
"""

from __future__ import annotations

from dataclasses import replace

from interlock.providers.base import ModelResult, ProviderError

# finish_reason / stop_reason values meaning the output limit cut the answer short:
# OpenAI-compatible "length", Anthropic "max_tokens" and "model_context_window_exceeded".
TRUNCATED = frozenset({"length", "max_tokens", "model_context_window_exceeded"})
# ...and meaning the answer was withheld: OpenAI "content_filter", Anthropic "refusal",
# Gemini-compatible servers "safety".
FILTERED = frozenset({"content_filter", "refusal", "safety"})


def at_limit(result: ModelResult, limit: int | None) -> ModelResult:
    """`result`, its finish reason made a truncation when the server's own count of output
    tokens reached `limit` (the max_tokens sent), whatever reason it stated: LiteLLM's
    Messages route says ``end_turn`` for an answer cut at the limit. The limit sent is kept
    in ``extra["max_output_tokens"]`` for the messages; an estimated count proves nothing."""
    if limit is None:
        return result
    extra = {**result.extra, "max_output_tokens": str(limit)}
    reason = (result.finish_reason or "").lower()
    estimated = extra.get("usage") == "estimated"
    if estimated or result.output_tokens < limit or reason in TRUNCATED or reason in FILTERED:
        return replace(result, extra=extra)
    if result.tool_calls:
        return replace(result, extra=extra)  # the calls were whole, or parsing says so
    extra["stated_finish_reason"] = result.finish_reason
    return replace(result, finish_reason="length", extra=extra)


def tokens_phrase(result: ModelResult) -> str:
    """The output tokens of `result` as a message states them: an estimate says so."""
    if result.extra.get("usage") == "estimated":
        return (
            f"about {result.output_tokens} output tokens, estimated at four characters a "
            "token: the server reported no usage"
        )
    return f"{result.output_tokens} output tokens"


def _truncated(result: ModelResult, where: str) -> str:
    """Why `result` counts as cut off, and what to change."""
    limit = result.extra.get("max_output_tokens")
    stated = result.extra.get("stated_finish_reason")
    if stated is not None:
        head = (
            f"{where} stopped with finish_reason {stated!r} but used all {limit} output "
            "tokens it was allowed: the answer was truncated at the output limit"
        )
    else:
        at = f" of {limit} tokens" if limit else ""
        head = (
            f"{where} stopped with finish_reason {result.finish_reason!r}: the answer was "
            f"truncated at the output limit{at} ({tokens_phrase(result)})"
        )
    keep = "set accept_truncated: true on the worker to keep truncated answers"
    if result.finish_reason == "model_context_window_exceeded":
        fix = (
            "the prompt and the answer filled the model's context window. Shorten the prompt "
            f"or its reads, or use a model with a larger context window, or {keep}"
        )
    elif not limit:
        fix = (
            "no max_output_tokens was sent, so the server's own limit cut it (its context "
            "window, or a default output length such as llama.cpp's --n-predict). Set "
            "max_output_tokens in interlock.toml, raise the server's limit or shorten the "
            f"prompt, or {keep}"
        )
    else:
        fix = f"Raise max_output_tokens in interlock.toml, or {keep}"
    return f"{head}; the output was discarded. {fix[0].upper()}{fix[1:]}"


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
        return ProviderError(_truncated(result, where), retryable=True, answered=result)
    if not result.text.strip():
        return ProviderError(
            f"{where} answered with an empty completion (finish_reason "
            f"{result.finish_reason!r}); an empty answer is never an output",
            retryable=True,
            answered=result,
        )
    return None
