"""The one place where a `ModelRequest` becomes each wire format's request body and headers.

Request settings (`interlock.core.params.RequestSettings`) are mapped here and nowhere
else: OpenAI-compatible chat completions and Anthropic Messages each get one function. A
setting a provider kind cannot send is refused before any call (`unsupported`), naming the
setting and what the kind accepts, instead of being dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from interlock.core.params import SETTING_NAMES, RequestSettings
from interlock.providers.attachments import anthropic_parts, openai_parts
from interlock.providers.failures import ProviderError

if TYPE_CHECKING:
    from interlock.providers.base import ModelRequest, ToolCall, ToolTurn

_COMMON = frozenset({"stop", "max_output_tokens", "timeout", "stream", "extra_body", "headers"})
SUPPORTED: Mapping[str, frozenset[str]] = {
    "openai": _COMMON | {"temperature", "top_p", "seed", "reasoning_effort"},
    # The Messages API of the current models takes no sampling settings (temperature,
    # top_p): the official SDK's request type has none. A server that still takes them gets
    # them through extra_body. reasoning_effort is sent as output_config.effort.
    "anthropic": _COMMON | {"reasoning_effort", "thinking_budget", "cache_prompt"},
    # An agent command gets its prompt only; the call's time limit still applies.
    "cli": frozenset({"timeout", "max_output_tokens"}),
    # The offline stand-in ignores every setting, so a pipeline runs before it is configured.
    "offline": frozenset(SETTING_NAMES),
}
"""Which request settings each provider kind can send."""


_ANTHROPIC_EFFORTS = ("low", "medium", "high", "xhigh")


def unsupported(kind: str, settings: RequestSettings) -> str | None:
    """Why `settings` cannot be sent to a provider of `kind`, or None when they can."""
    allowed = SUPPORTED.get(kind, frozenset())
    given = settings.model_fields_set  # asked before every call: no dump of the model
    refused = [
        name
        for name in SETTING_NAMES
        if name in given and name not in allowed and getattr(settings, name) is not None
    ]
    if not refused:
        return None
    names = ", ".join(repr(n) for n in refused)
    accepted = ", ".join(sorted(allowed)) or "none"
    return f"the {kind} wire format does not support {names}; it accepts: {accepted}"


def merge_body(body: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with `extra` merged in: nested objects key by key, anything else replaced."""
    merged = dict(body)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = merge_body(merged[key], value)
        else:
            merged[key] = value
    return merged


def streaming(request: ModelRequest) -> bool:
    """Whether the request asks for an event stream (the default) or one JSON answer."""
    return request.settings.stream is not False


def headers_for(request: ModelRequest, own: Mapping[str, str]) -> dict[str, str]:
    """The request's configured headers under the provider's own (authentication wins)."""
    configured = request.settings.headers or {}
    lowered = {k.lower() for k in own}
    return {**{k: v for k, v in configured.items() if k.lower() not in lowered}, **own}


def openai_body(request: ModelRequest, *, max_tokens: int | None, max_tokens_field: str) -> Any:
    """The chat-completions body for `request`."""
    settings = request.settings
    content: Any = request.prompt
    if request.attachments:
        content = [{"type": "text", "text": request.prompt}, *openai_parts(request.attachments)]
    messages: list[dict[str, Any]] = [{"role": "user", "content": content}]
    if request.system:
        messages.insert(0, {"role": "system", "content": request.system})
    messages += openai_turns(request.turns)
    body: dict[str, Any] = {"model": request.model, "messages": messages}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.input_schema,
                },
            }
            for tool in request.tools
        ]
        # Said outright: some servers (llama-cpp-python) read a missing tool_choice as
        # "none", and the model never calls a tool.
        body["tool_choice"] = "auto"
    if streaming(request):
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if max_tokens:
        body[max_tokens_field] = max_tokens
    for name in ("temperature", "top_p", "seed", "stop", "reasoning_effort"):
        value = getattr(settings, name)
        if value is not None:
            body[name] = value
    if request.response_schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.schema_name,
                "schema": request.response_schema,
                "strict": strict_compatible(request.response_schema),
            },
        }
    return merge_body(body, settings.extra_body or {})


def anthropic_body(request: ModelRequest, *, max_tokens: int) -> Any:
    """The Messages body for `request`.

    Raises:
        ProviderError: The thinking budget does not leave room below `max_tokens` (the API
            counts thinking as output).
    """
    settings = request.settings
    cache = {"cache_control": {"type": "ephemeral"}} if settings.cache_prompt else {}
    content: Any = request.prompt
    if cache or request.attachments:
        # The prompt holds the input files: the large, repeated part worth caching. Images
        # and documents go first, as Anthropic advises.
        text = {"type": "text", "text": request.prompt, **cache}
        content = [*anthropic_parts(request.attachments), text]
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": content}, *anthropic_turns(request.turns)],
    }
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
    if streaming(request):
        body["stream"] = True
    if request.system:
        body["system"] = (
            [{"type": "text", "text": request.system, **cache}] if cache else request.system
        )
    if settings.stop:
        body["stop_sequences"] = settings.stop
    if settings.thinking_budget is not None:
        if settings.thinking_budget >= max_tokens:
            raise ProviderError(
                f"model {request.alias!r}: thinking_budget ({settings.thinking_budget}) must be "
                f"below max_output_tokens ({max_tokens}), which includes the thinking: raise "
                "max_output_tokens or lower thinking_budget",
                retryable=False,
            )
        body["thinking"] = {"type": "enabled", "budget_tokens": settings.thinking_budget}
    output: dict[str, Any] = {}
    if settings.reasoning_effort is not None:
        if settings.reasoning_effort not in _ANTHROPIC_EFFORTS:
            raise ProviderError(
                f"model {request.alias!r}: reasoning_effort {settings.reasoning_effort!r} is not "
                f"an Anthropic effort; use one of: {', '.join(_ANTHROPIC_EFFORTS)}",
                retryable=False,
            )
        output["effort"] = settings.reasoning_effort
    if request.response_schema is not None:
        output["format"] = {"type": "json_schema", "schema": request.response_schema}
    if output:
        body["output_config"] = output
    return merge_body(body, settings.extra_body or {})


def openai_turns(turns: tuple[ToolTurn, ...]) -> list[dict[str, Any]]:
    """The tool loop so far as chat messages: each assistant message with its `tool_calls`,
    then one `tool` message per result (which has no error flag: an error says so)."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in turn.calls
        ]
        # "" rather than null for a turn of calls alone: the API accepts both, and some
        # servers (llama-cpp-python) answer null with HTTP 500.
        messages.append({"role": "assistant", "content": turn.text, "tool_calls": calls})
        for result in turn.results:
            content = f"error: {result.content}" if result.is_error else result.content
            messages.append({"role": "tool", "tool_call_id": result.call_id, "content": content})
    return messages


def anthropic_turns(turns: tuple[ToolTurn, ...]) -> list[dict[str, Any]]:
    """The tool loop so far as Messages: an assistant message of text and `tool_use` blocks,
    then a user message of the matching `tool_result` blocks."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        # Thinking first, as it came: the API checks it is the answer's own (its signature).
        blocks: list[dict[str, Any]] = list(turn.thinking)
        blocks += [{"type": "text", "text": turn.text}] if turn.text else []
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": call_input(c)}
            for c in turn.calls
        ]
        results = [
            {
                "type": "tool_result",
                "tool_use_id": r.call_id,
                "content": r.content,
                **({"is_error": True} if r.is_error else {}),
            }
            for r in turn.results
        ]
        messages += [{"role": "assistant", "content": blocks}, {"role": "user", "content": results}]
    return messages


def call_input(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as an object; arguments that are no JSON object read as none (the
    loop has already answered such a call with an error)."""
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def strict_compatible(schema: Any) -> bool:
    """Whether OpenAI's strict mode accepts `schema`: every object closes its properties
    (``additionalProperties: false``) and requires all of them. Otherwise the schema is
    sent without strict mode, and the answer is validated here all the same."""
    if isinstance(schema, list):
        return all(strict_compatible(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            return False
        if set(schema.get("required") or []) != set(properties):
            return False
    return all(strict_compatible(value) for value in schema.values())
