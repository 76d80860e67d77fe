"""What interlock sends and parses, checked against the official openai and anthropic SDKs'
own request and response types (not against our own idea of the wire formats)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, get_type_hints

# The SDKs come with the dev extra; without them these tests fail at import, never skip.
import anthropic
import anthropic.types as anthropic_types
import httpx2  # the HTTP library these SDK versions use
import openai
import openai.types.chat as openai_types
import pytest
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from pydantic import BaseModel, TypeAdapter

from interlock.core.params import RequestSettings
from interlock.providers import anthropic_messages, openai_chat
from interlock.providers.attachments import Attachment
from interlock.providers.request import anthropic_body, openai_body
from interlock.providers.sse import ServerSentEvent
from interlock.providers.usage import openai_details

from .helpers import request

SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number"}},
    "required": ["score"],
    "additionalProperties": False,
}
FILES = (
    Attachment(name="chart.png", media_type="image/png", data=b"\x89PNG"),
    Attachment(name="paper.pdf", media_type="application/pdf", data=b"%PDF-1.4"),
)


def conforms(params: Any, body: dict[str, Any]) -> None:
    """`body` validates as the SDK's TypedDict (pydantic checks the nested objects; lists
    are validated lazily and left alone) and uses only keys the SDK knows."""
    unknown = set(body) - set(get_type_hints(params))
    assert not unknown, f"keys the SDK does not know: {unknown}"
    TypeAdapter(params).validate_python(body)


def sent_by_sdk(client_class: Any, create: Any, body: dict[str, Any]) -> dict[str, Any]:
    """What the official client sends when called with `body` as its keyword arguments: it
    refuses an argument it does not know, and must send the same JSON interlock sends."""
    sent: list[dict[str, Any]] = []

    def answer(request: Any) -> Any:
        sent.append(json.loads(request.content))
        return httpx2.Response(400, json={"error": {"message": "recorded", "type": "x"}})

    client = client_class(
        api_key="k",
        base_url="http://sdk.invalid/v1" if client_class is openai.OpenAI else "http://sdk.invalid",
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
        max_retries=0,
    )
    with pytest.raises(
        openai.BadRequestError if client_class is openai.OpenAI else anthropic.BadRequestError
    ):
        create(client)(**body)
    return sent[0]


@pytest.mark.parametrize("stream", [True, False])
def test_openai_bodies_are_valid_sdk_create_params(stream: bool) -> None:
    """Every setting, a schema and attachments make a body the openai SDK accepts."""
    settings = RequestSettings(
        temperature=0.2, top_p=0.9, seed=1, stop=["END"], reasoning_effort="high", stream=stream
    )
    body = openai_body(
        request(settings=settings, response_schema=SCHEMA, attachments=FILES),
        max_tokens=100,
        max_tokens_field="max_completion_tokens",
    )
    params = (
        completion_create_params.CompletionCreateParamsStreaming
        if stream
        else completion_create_params.CompletionCreateParamsNonStreaming
    )
    conforms(params, body)
    assert sent_by_sdk(openai.OpenAI, lambda c: c.chat.completions.create, body) == body


@pytest.mark.parametrize("stream", [True, False])
def test_anthropic_bodies_are_valid_sdk_create_params(stream: bool) -> None:
    """Thinking, effort, stop sequences, prompt caching, a schema and attachments make a body
    the anthropic SDK accepts."""
    settings = RequestSettings(
        stop=["###"],
        thinking_budget=2048,
        cache_prompt=True,
        reasoning_effort="high",
        stream=stream,
        extra_body={"metadata": {"user_id": "u"}},
    )
    body = anthropic_body(
        request(settings=settings, response_schema=SCHEMA, attachments=FILES), max_tokens=4096
    )
    params = (
        message_create_params.MessageCreateParamsStreaming
        if stream
        else message_create_params.MessageCreateParamsNonStreaming
    )
    conforms(params, body)
    assert sent_by_sdk(anthropic.Anthropic, lambda c: c.messages.create, body) == body


async def _events(
    items: list[tuple[str | None, BaseModel | str]],
) -> AsyncIterator[ServerSentEvent]:
    for event, item in items:
        data = item if isinstance(item, str) else item.model_dump_json(exclude_none=True)
        yield ServerSentEvent(event=event or "message", data=data)


def test_openai_sdk_chunks_and_completions_parse_with_their_usage_details() -> None:
    """Chunks and a completion built with the SDK's types give the text, the finish
    reason and the cached and reasoning tokens."""
    base = {"id": "c", "created": 1, "model": "gpt-test", "object": "chat.completion.chunk"}
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 300,
        "total_tokens": 1300,
        "prompt_tokens_details": {"cached_tokens": 600},
        "completion_tokens_details": {"reasoning_tokens": 100},
    }
    chunk = openai_types.ChatCompletionChunk.model_validate
    chunks = [
        chunk({**base, "choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
        chunk({**base, "choices": [{"index": 0, "delta": {"content": "lo"}}]}),
        chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        chunk({**base, "choices": [], "usage": usage}),
    ]
    items: list[tuple[str | None, BaseModel | str]] = [(None, c) for c in chunks]
    state = asyncio.run(openai_chat._read_stream("sdk", _events([*items, (None, "[DONE]")]), None))
    assert ("".join(state.parts), state.finish_reason) == ("Hello", "stop")
    assert state.usage is not None
    assert openai_details(state.usage)["cache_read_tokens"] == 600
    assert openai_details(state.usage)["reasoning_tokens"] == 100
    completion = openai_types.ChatCompletion.model_validate(
        {
            **base,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "length",
                    "message": {"role": "assistant", "content": "Hello"},
                }
            ],
            "usage": usage,
        }
    )
    answer = openai_chat._read_answer("sdk", json.loads(completion.model_dump_json()), None)
    assert ("".join(answer.parts), answer.finish_reason) == ("Hello", "length")


def test_anthropic_sdk_events_and_messages_parse_with_cache_usage() -> None:
    """Stream events and a message built with the SDK's types give the text (thinking left
    out), the stop reason and the cache figures."""
    usage = {
        "input_tokens": 50,
        "output_tokens": 1,
        "cache_read_input_tokens": 9000,
        "cache_creation_input_tokens": 400,
    }
    message: dict[str, Any] = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    t = anthropic_types
    events: list[tuple[str | None, BaseModel | str]] = [
        (
            "message_start",
            t.RawMessageStartEvent.model_validate({"type": "message_start", "message": message}),
        ),
        (
            "content_block_start",
            t.RawContentBlockStartEvent.model_validate(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                }
            ),
        ),
        (
            "content_block_delta",
            t.RawContentBlockDeltaEvent.model_validate(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "hmm"},
                }
            ),
        ),
        (
            "content_block_delta",
            t.RawContentBlockDeltaEvent.model_validate(
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "text_delta", "text": "Answer."},
                }
            ),
        ),
        (
            "message_delta",
            t.RawMessageDeltaEvent.model_validate(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 70},
                }
            ),
        ),
        ("message_stop", t.RawMessageStopEvent(type="message_stop")),
    ]
    state = asyncio.run(anthropic_messages._read_stream("sdk", _events(events), None))
    assert ("".join(state.parts), state.stop_reason) == ("Answer.", "end_turn")
    assert (state.input_tokens, state.output_tokens) == (9450, 70)
    assert (state.cache_read_tokens, state.cache_write_tokens) == (9000, 400)
    whole = t.Message.model_validate(
        {
            **message,
            "stop_reason": "max_tokens",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Answer."},
            ],
        }
    )
    answer = anthropic_messages._read_answer("sdk", json.loads(whole.model_dump_json()), None)
    assert ("".join(answer.parts), answer.stop_reason) == ("Answer.", "max_tokens")
    assert answer.cache_read_tokens == 9000
