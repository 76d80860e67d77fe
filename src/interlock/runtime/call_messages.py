"""Chat messages in the OpenAI shape, to and from interlock's model requests.

A `ModelRequest` holds a system text, one user prompt and the tool loop after it (turns of
an assistant's tool calls and their results). A conversation of chat messages maps onto it
as follows: the system (and developer) messages are the system text; the last user message
is the prompt, and the messages after it, assistant tool calls and their `tool` results, are
its turns. The messages before the last user message (an earlier exchange) are put into the
prompt as a transcript above it, so every conversation can be sent to either wire format.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from interlock.providers.base import ModelResult, ToolCall, ToolResult, ToolSpec, ToolTurn


class MessageError(ValueError):
    """The messages cannot be sent (no user message, a tool result for no call)."""


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in ("text", "input_text"):
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


def _calls(message: Mapping[str, Any]) -> tuple[ToolCall, ...]:
    calls = []
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments or {})
        calls.append(
            ToolCall(
                id=str(call.get("id") or f"call_{index}"),
                name=str(function.get("name") or ""),
                arguments=arguments,
            )
        )
    return tuple(calls)


def _transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """Messages before the prompt, as text the model reads above it."""
    lines = ["# Conversation so far", ""]
    for message in messages:
        role = str(message.get("role", "user"))
        lines += [f"## {role.capitalize()}", ""]
        text = text_of(message.get("content"))
        if text:
            lines += [text, ""]
        for call in _calls(message):
            lines += [f"(called `{call.name}` with {call.arguments})", ""]
    return "\n".join(lines)


def split_messages(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[str, str, tuple[ToolTurn, ...]]:
    """(system, prompt, turns) of a chat conversation (see the module docstring).

    Raises:
        MessageError: No user message, or a tool result that answers no call.
    """
    system = "\n\n".join(
        text_of(m.get("content")) for m in messages if m.get("role") in ("system", "developer")
    )
    rest = [m for m in messages if m.get("role") not in ("system", "developer")]
    users = [i for i, m in enumerate(rest) if m.get("role") == "user"]
    if not users:
        raise MessageError("the messages hold no user message: there is nothing to answer")
    last = users[-1]
    prompt = text_of(rest[last].get("content"))
    if last:
        prompt = f"{_transcript(rest[:last])}\n# Now\n\n{prompt}"
    turns: list[ToolTurn] = []
    for message in rest[last + 1 :]:
        role = message.get("role")
        if role == "assistant":
            turns.append(
                ToolTurn(text=text_of(message.get("content")), calls=_calls(message), results=())
            )
        elif role == "tool":
            if not turns:
                raise MessageError("a tool message comes before any assistant tool call")
            turn = turns[-1]
            result = ToolResult(
                call_id=str(message.get("tool_call_id") or ""),
                content=text_of(message.get("content")),
            )
            turns[-1] = ToolTurn(text=turn.text, calls=turn.calls, results=(*turn.results, result))
    return system, prompt, tuple(turns)


def tool_specs(tools: Sequence[Mapping[str, Any]] | None) -> tuple[ToolSpec, ...]:
    """OpenAI `tools` entries (``{"type": "function", "function": {...}}``) as tool specs."""
    specs = []
    for tool in tools or ():
        function = tool.get("function") or tool
        specs.append(
            ToolSpec(
                name=str(function["name"]),
                description=str(function.get("description") or ""),
                input_schema=dict(function.get("parameters") or {"type": "object"}),
            )
        )
    return tuple(specs)


_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
           "tool_use": "tool_calls"}  # fmt: skip


def finish_reason(result: ModelResult) -> str:
    """The answer's finish reason in OpenAI's words."""
    if result.tool_calls:
        return "tool_calls"
    reason = result.finish_reason or "stop"
    return _FINISH.get(reason, reason)


def chat_completion(result: ModelResult, *, alias: str, number: int) -> dict[str, Any]:
    """A result as the JSON of an OpenAI chat completion."""
    message: dict[str, Any] = {"role": "assistant", "content": result.text}
    if result.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in result.tool_calls
        ]
        message["content"] = result.text or None
    usage: dict[str, Any] = {
        "prompt_tokens": result.input_tokens,
        "completion_tokens": result.output_tokens,
        "total_tokens": result.input_tokens + result.output_tokens,
    }
    if result.cache_read_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": result.cache_read_tokens}
    if result.reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": result.reasoning_tokens}
    return {
        "id": f"interlock-{number}",
        "object": "chat.completion",
        "created": 0,
        "model": alias,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(result)}],
        "usage": usage,
    }


class Shaped:
    """JSON values read as attributes (``completion.choices[0].message.content``), for when
    the `openai` package is not installed; `model_dump()` gives the JSON back."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)

    def __getattr__(self, name: str) -> Any:
        try:
            return _shaped(self._data[name])
        except KeyError:
            if name.startswith("_"):
                raise AttributeError(name) from None
            return None  # an optional field the answer left out, as the SDK's types read

    def model_dump(self) -> dict[str, Any]:
        """The JSON values."""
        return dict(self._data)

    def __repr__(self) -> str:
        return f"Shaped({self._data!r})"


def _shaped(value: Any) -> Any:
    if isinstance(value, Mapping):
        return Shaped(value)
    if isinstance(value, list):
        return [_shaped(item) for item in value]
    return value


def openai_shaped(data: dict[str, Any]) -> Any:
    """The chat completion as the `openai` package's `ChatCompletion` when it is installed,
    as a `Shaped` object otherwise (the same attribute names)."""
    try:
        from openai.types.chat import ChatCompletion
    except ImportError:
        return Shaped(data)
    return ChatCompletion.model_validate(data)
