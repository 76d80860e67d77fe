"""The tool loop's requests and the tool calls it reads, checked against the official openai
and anthropic SDKs' own types."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from anthropic import Anthropic
from anthropic import types as anthropic_types
from anthropic.types import message_create_params
from openai import OpenAI
from openai.types import chat as openai_types
from openai.types.chat import completion_create_params
from pydantic import BaseModel, TypeAdapter

from interlock.providers import anthropic_messages, openai_chat
from interlock.providers.base import ToolCall, ToolResult, ToolSpec, ToolTurn
from interlock.providers.request import anthropic_body, openai_body

from .helpers import request
from .test_sdk_types import _events, conforms, sent_by_sdk

TOOLS = (
    ToolSpec(
        name="add",
        description="Add two integers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
)
TURNS = (
    ToolTurn(
        text="Adding.",
        calls=(
            ToolCall(id="call_1", name="add", arguments='{"a": 2, "b": 3}'),
            ToolCall(id="call_2", name="nope", arguments="{}"),
        ),
        results=(
            ToolResult(call_id="call_1", content="5"),
            ToolResult(call_id="call_2", content="unknown tool 'nope'", is_error=True),
        ),
    ),
    ToolTurn(
        text="",
        calls=(ToolCall(id="call_3", name="add", arguments='{"a": 5, "b": 1}'),),
        results=(ToolResult(call_id="call_3", content="6"),),
    ),
)


def each_conforms(params: Any, items: list[dict[str, Any]]) -> None:
    """Every item validates as the SDK's type (the body check leaves lists alone)."""
    adapter = TypeAdapter(params)
    for item in items:
        adapter.validate_python(item, strict=False)


@pytest.mark.parametrize("stream", [True, False])
def test_openai_tool_requests_are_valid_sdk_create_params(stream: bool) -> None:
    """Tools and earlier turns (assistant tool_calls, tool messages) make a body the openai
    SDK accepts and sends unchanged; each message and tool validates as the SDK's type."""
    from interlock.core.params import RequestSettings

    body = openai_body(
        request(tools=TOOLS, turns=TURNS, settings=RequestSettings(stream=stream)),
        max_tokens=100,
        max_tokens_field="max_completion_tokens",
    )
    params = (
        completion_create_params.CompletionCreateParamsStreaming
        if stream
        else completion_create_params.CompletionCreateParamsNonStreaming
    )
    conforms(params, body)
    each_conforms(openai_types.ChatCompletionMessageParam, body["messages"])
    each_conforms(openai_types.ChatCompletionToolParam, body["tools"])
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool"]
    assert sent_by_sdk(OpenAI, lambda c: c.chat.completions.create, body) == body
    # What llama-cpp-python needs to run a tool loop at all: a turn of calls alone has ""
    # content (null is an HTTP 500 there), and tool_choice is said (missing reads as none).
    assert body["messages"][5]["content"] == ""
    assert body["tool_choice"] == "auto"


def test_a_request_without_tools_says_no_tool_choice() -> None:
    body = openai_body(request(), max_tokens=100, max_tokens_field="max_tokens")
    assert "tool_choice" not in body and "tools" not in body


@pytest.mark.parametrize("stream", [True, False])
def test_anthropic_tool_requests_are_valid_sdk_create_params(stream: bool) -> None:
    """Tools and earlier turns (tool_use blocks, tool_result blocks with is_error) make a
    body the anthropic SDK accepts and sends unchanged."""
    from interlock.core.params import RequestSettings

    body = anthropic_body(
        request(tools=TOOLS, turns=TURNS, settings=RequestSettings(stream=stream)),
        max_tokens=4096,
    )
    params = (
        message_create_params.MessageCreateParamsStreaming
        if stream
        else message_create_params.MessageCreateParamsNonStreaming
    )
    conforms(params, body)
    each_conforms(anthropic_types.MessageParam, body["messages"])
    each_conforms(anthropic_types.ToolParam, body["tools"])
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert body["messages"][2]["content"][1]["is_error"] is True
    assert sent_by_sdk(Anthropic, lambda c: c.messages.create, body) == body


def test_openai_sdk_tool_call_chunks_and_completions_parse_into_calls() -> None:
    """Tool-call deltas built with the SDK's chunk type (id and name first, the arguments
    in fragments, two calls interleaved by index) and a whole completion give the calls."""
    base = {"id": "c", "created": 1, "model": "gpt-test", "object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> BaseModel:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return openai_types.ChatCompletionChunk.model_validate({**base, "choices": [choice]})

    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, **fields}]}

    chunks = [
        chunk(call(0, id="call_a", type="function", function={"name": "add", "arguments": ""})),
        chunk(call(1, id="call_b", type="function", function={"name": "lookup"})),
        chunk(call(0, function={"arguments": '{"a": 2,'})),
        chunk(call(1, function={"arguments": '{"word": "alpha"}'})),
        chunk(call(0, function={"arguments": ' "b": 3}'})),
        chunk({}, "tool_calls"),
    ]
    items: list[tuple[str | None, BaseModel | str]] = [(None, c) for c in chunks]
    state = asyncio.run(openai_chat._read_stream("sdk", _events([*items, (None, "[DONE]")]), None))
    expected = (
        ToolCall(id="call_a", name="add", arguments='{"a": 2, "b": 3}'),
        ToolCall(id="call_b", name="lookup", arguments='{"word": "alpha"}'),
    )
    assert state.tool_calls() == expected
    assert state.finish_reason == "tool_calls"
    completion = openai_types.ChatCompletion.model_validate(
        {
            **base,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments},
                            }
                            for c in expected
                        ],
                    },
                }
            ],
        }
    )
    answer = openai_chat._read_answer("sdk", json.loads(completion.model_dump_json()), None)
    assert answer.tool_calls() == expected


def test_anthropic_sdk_tool_use_events_and_messages_parse_into_calls() -> None:
    """A tool_use block built with the SDK's event types, its input streamed as
    input_json_delta fragments after a text block, and a whole message give the calls."""
    t = anthropic_types
    message: dict[str, Any] = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }

    def event(kind: str, **fields: Any) -> tuple[str, BaseModel]:
        types: dict[str, type[BaseModel]] = {
            "content_block_start": t.RawContentBlockStartEvent,
            "content_block_delta": t.RawContentBlockDeltaEvent,
            "content_block_stop": t.RawContentBlockStopEvent,
            "message_delta": t.RawMessageDeltaEvent,
        }
        return kind, types[kind].model_validate({"type": kind, **fields})

    use = {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}
    thought = {"type": "thinking", "thinking": "", "signature": ""}
    events: list[tuple[str | None, BaseModel | str]] = [
        (
            "message_start",
            t.RawMessageStartEvent.model_validate({"type": "message_start", "message": message}),
        ),
        event("content_block_start", index=0, content_block=thought),
        event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "Sum"}),
        event("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "s1"}),
        event("content_block_stop", index=0),
        event("content_block_start", index=2, content_block={"type": "text", "text": ""}),
        event("content_block_delta", index=2, delta={"type": "text_delta", "text": "Adding."}),
        event("content_block_stop", index=2),
        event("content_block_start", index=1, content_block=use),
        event(
            "content_block_delta",
            index=1,
            delta={"type": "input_json_delta", "partial_json": '{"a": 2'},
        ),
        event(
            "content_block_delta",
            index=1,
            delta={"type": "input_json_delta", "partial_json": ', "b": 3}'},
        ),
        event("content_block_stop", index=1),
        event(
            "message_delta",
            delta={"stop_reason": "tool_use", "stop_sequence": None},
            usage={"output_tokens": 30},
        ),
        ("message_stop", t.RawMessageStopEvent(type="message_stop")),
    ]
    state = asyncio.run(anthropic_messages._read_stream("sdk", _events(events), None))
    assert "".join(state.parts) == "Adding." and state.stop_reason == "tool_use"
    assert state.tool_calls() == (ToolCall(id="toolu_1", name="add", arguments='{"a": 2, "b": 3}'),)
    thinking = {"type": "thinking", "thinking": "Sum", "signature": "s1"}
    assert state.thinking_blocks() == (thinking,)
    turn = ToolTurn(
        text="Adding.",
        calls=state.tool_calls(),
        results=(ToolResult(call_id="toolu_1", content="5"),),
        thinking=(thinking,),
    )
    sent = anthropic_body(request(turns=(turn,)), max_tokens=4096)["messages"][1]
    assert sent["content"][0] == thinking  # sent back first, as the API requires
    each_conforms(anthropic_types.MessageParam, [sent])
    whole = t.Message.model_validate(
        {**message, "stop_reason": "tool_use", "content": [{**use, "input": {"a": 2, "b": 3}}]}
    )
    answer = anthropic_messages._read_answer("sdk", json.loads(whole.model_dump_json()), None)
    assert [(c.name, json.loads(c.arguments)) for c in answer.tool_calls()] == [
        ("add", {"a": 2, "b": 3})
    ]
