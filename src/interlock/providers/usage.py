"""Token usage as each wire format reports it, in one shape.

`input_tokens` is every input token, cached ones included, and `output_tokens` every output
token, reasoning included, as budgets count them; the cached-read, cache-write and reasoning
tokens are the parts of those totals that are priced differently.

OpenAI-compatible servers report ``prompt_tokens_details.cached_tokens`` and
``completion_tokens_details.reasoning_tokens`` inside the totals (LiteLLM adds Anthropic's
``cache_creation_input_tokens`` / ``cache_read_input_tokens``). Anthropic reports
``input_tokens`` *without* ``cache_creation_input_tokens`` and ``cache_read_input_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The most steps (model calls and tool calls, with their times) an attempt's usage lists for
# its trace.
MAX_STEPS = 200


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def openai_details(usage: Mapping[str, Any]) -> dict[str, int]:
    """The cached-read, cache-write and reasoning parts of a chat-completions usage."""
    prompt = usage.get("prompt_tokens_details")
    prompt = prompt if isinstance(prompt, Mapping) else {}
    completion = usage.get("completion_tokens_details")
    completion = completion if isinstance(completion, Mapping) else {}
    cache_read = _int(prompt.get("cached_tokens")) or _int(usage.get("cache_read_input_tokens"))
    cache_write = _int(prompt.get("cache_creation_tokens")) or _int(
        usage.get("cache_creation_input_tokens")
    )
    return {
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "reasoning_tokens": _int(completion.get("reasoning_tokens")),
    }


def anthropic_cache(usage: Mapping[str, Any]) -> tuple[int, int] | None:
    """(cache read, cache write) of a Messages usage, or None when it reports neither."""
    keys = ("cache_read_input_tokens", "cache_creation_input_tokens")
    if not any(isinstance(usage.get(k), int) for k in keys):
        return None
    return _int(usage.get(keys[0])), _int(usage.get(keys[1]))
