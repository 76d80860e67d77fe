"""OpenAI-compatible chat completions, streamed.

Serves OpenAI itself and the local servers that speak the same API: Ollama
(``http://localhost:11434/v1``), vLLM, the llama.cpp server, LM Studio. The base URL is
everything before ``/chat/completions``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from interlock.providers.base import (
    CallStopped,
    ModelRequest,
    ModelResult,
    ProviderError,
    TokenCallback,
    ToolCall,
)
from interlock.providers.bounds import AnswerMeter, AnswerTooLarge
from interlock.providers.prompt import estimate_tokens
from interlock.providers.redaction import Secret
from interlock.providers.request import headers_for, openai_body, streaming
from interlock.providers.settings import ResolvedModel
from interlock.providers.sse import ServerSentEvent
from interlock.providers.transport import HttpEndpoint
from interlock.providers.usage import openai_details
from interlock.providers.verdict import at_limit

# What a new tool call's entry counts against max_answer_bytes, however little it holds: a
# stream of empty calls with new indexes must not grow without bound either.
_CALL_ENTRY = 256


@dataclass
class _Stream:
    """What has arrived so far on one chat-completions stream."""

    parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    response_model: str | None = None
    began: bool = False  # the server started answering
    # Tool calls by their index in the answer: id, name and the argument fragments so far.
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    meter: AnswerMeter | None = None  # counts what is kept, against max_answer_bytes

    def keep(self, text: str) -> str:
        """`text`, counted against the answer's limit before it is kept."""
        return text if self.meter is None else self.meter.add(text)

    def add_call(self, index: int, part: dict[str, Any]) -> None:
        """Fold one `tool_calls` entry (whole, or a streamed fragment) into the calls."""
        if index not in self.calls and self.meter is not None:
            self.meter.count(_CALL_ENTRY)
        call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        function = part.get("function") or {}
        call["id"] = call["id"] or self.keep(part.get("id") or "")
        call["name"] = call["name"] or self.keep(function.get("name") or "")
        if isinstance(function.get("arguments"), str):
            call["arguments"].append(self.keep(function["arguments"]))

    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The calls the model asked for, in order (an id made up when a server sent none)."""
        return tuple(
            ToolCall(
                id=call["id"] or f"call_{index}",
                name=call["name"],
                arguments="".join(call["arguments"]),
            )
            for index, call in sorted(self.calls.items())
        )


class OpenAIChatProvider:
    """Calls ``POST {base_url}/chat/completions`` with ``stream: true``.

    Args:
        endpoint: The provider's shared endpoint (pool, limiter, retries).
        resolved: The alias this provider object serves, for its prices and output cap.
        api_key: Sent as a bearer token; None for local servers that need none.
        max_tokens_field: ``max_tokens`` or ``max_completion_tokens`` (OpenAI's newer name).
    """

    def __init__(
        self,
        *,
        endpoint: HttpEndpoint,
        resolved: ResolvedModel,
        api_key: Secret | None,
        max_tokens_field: str = "max_tokens",
    ) -> None:
        self.name = endpoint.name
        self._endpoint = endpoint
        self._resolved = resolved
        self._api_key = api_key
        self._max_tokens_field = max_tokens_field

    def __repr__(self) -> str:
        return f"OpenAIChatProvider(name={self.name!r}, alias={self._resolved.alias!r})"

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        max_tokens = request.max_output_tokens or self._resolved.max_output_tokens
        body: dict[str, Any] = openai_body(
            request, max_tokens=max_tokens, max_tokens_field=self._max_tokens_field
        )
        return body

    def batch_body(self, request: ModelRequest) -> dict[str, Any]:
        """The body of `request` as a line of a batch (`interlock.providers.batch_provider`)."""
        return self._body(request)

    def batch_result(self, request: ModelRequest, answer: dict[str, Any]) -> ModelResult:
        """The result of `request` from its batch's answer, priced at the batch price."""
        read = _read_answer(self.name, answer, None)
        return self._result(request, read, time.perf_counter(), batch=True)

    def _headers(self, request: ModelRequest) -> dict[str, str]:
        headers = {"Idempotency-Key": request.idempotency_key}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.reveal()}"
        if not streaming(request):
            headers["Accept"] = "application/json"
        return headers_for(request, headers)

    async def complete(
        self, request: ModelRequest, on_token: TokenCallback | None = None
    ) -> ModelResult:
        """Stream one completion; see `interlock.providers.base.Provider`."""
        started = time.perf_counter()
        estimate = estimate_tokens(request.system) + estimate_tokens(request.prompt)
        estimate += request.max_output_tokens or self._resolved.max_output_tokens or 0

        limits = self._resolved.limits
        # What the stream brought so far, also when it is stopped.
        arrived = _Stream(meter=AnswerMeter(limits, self.name))

        async def consume(events: AsyncIterator[ServerSentEvent]) -> _Stream:
            return await _read_stream(self.name, events, on_token, arrived)

        def parse(answer: dict[str, Any]) -> _Stream:
            return _read_answer(self.name, answer, on_token)

        limiter = self._endpoint.limiter
        try:
            async with limiter.slot():
                stream = await self._endpoint.stream(
                    path="chat/completions",
                    headers=self._headers(request),
                    body=self._body(request),
                    timeout=request.timeout,
                    estimated_tokens=estimate,
                    secret=self._api_key,
                    consume=consume,
                    parse=parse,
                    limits=limits,
                )
        except asyncio.CancelledError as stopped:
            if not arrived.began:
                raise
            arrived.finish_reason = arrived.finish_reason if arrived.usage else "stopped"
            raise CallStopped(self._result(request, arrived, started)) from stopped
        except AnswerTooLarge as exc:
            if not arrived.began:
                raise
            # What arrived was generated, and is paid for: the failure carries its cost.
            arrived.finish_reason = "stopped"
            spent = replace(self._result(request, arrived, started), text="", tool_calls=())
            raise AnswerTooLarge(str(exc), answered=spent) from None
        except ProviderError as failure:
            if not arrived.began or failure.answered is not None:
                raise
            # A stream that broke off or timed out: what arrived was generated and is paid
            # for; the failure records it (estimated unless the server sent its usage).
            arrived.finish_reason = "stopped"
            failure.answered = replace(
                self._result(request, arrived, started), text="", tool_calls=()
            )
            raise
        limit = request.max_output_tokens or self._resolved.max_output_tokens
        result = at_limit(self._result(request, stream, started), limit)
        limiter.settle(estimate, result.input_tokens + result.output_tokens, request.model)
        return result

    def _result(
        self, request: ModelRequest, stream: _Stream, started: float, *, batch: bool = False
    ) -> ModelResult:
        """The call's result from what arrived, priced at the tier it was sent at (`batch`:
        through the provider's batch API); token counts estimated when not reported."""
        text = "".join(stream.parts)
        extra: dict[str, str] = {}
        usage = stream.usage or {}
        input_tokens = usage.get("prompt_tokens")
        output_tokens = usage.get("completion_tokens")
        if not isinstance(input_tokens, int) or not isinstance(output_tokens, int):
            # Some compatible servers ignore stream_options; count approximately instead.
            input_tokens = estimate_tokens(request.system) + estimate_tokens(request.prompt)
            output_tokens = estimate_tokens(text)
            extra["usage"] = "estimated"
        if stream.response_model:
            extra["response_model"] = stream.response_model
        details = openai_details(usage)
        return ModelResult(
            text=text,
            provider=self.name,
            model=request.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            latency_s=time.perf_counter() - started,
            cost_usd=self._resolved.sent_with(request.settings, batch=batch).cost_usd(
                input_tokens, output_tokens, **details
            ),
            finish_reason=stream.finish_reason or "stop",
            extra=extra,
            tool_calls=stream.tool_calls(),
            cache_read_tokens=details["cache_read_tokens"],
            cache_write_tokens=details["cache_write_tokens"],
            reasoning_tokens=details["reasoning_tokens"],
        )


def _read_answer(name: str, answer: dict[str, Any], on_token: TokenCallback | None) -> _Stream:
    """Read a complete (non-streamed) chat completion."""
    state = _Stream(response_model=answer.get("model"))
    if isinstance(answer.get("usage"), dict):
        state.usage = answer["usage"]
    for choice in answer.get("choices") or []:
        message = choice.get("message") or {}
        content = message.get("content")
        if isinstance(content, str) and content:
            state.parts.append(content)
            if on_token is not None:
                on_token(content)
        for index, call in enumerate(message.get("tool_calls") or []):
            if isinstance(call, dict):
                state.add_call(index, call)
        state.finish_reason = choice.get("finish_reason") or state.finish_reason
    if state.finish_reason is None:
        raise ProviderError(f"{name}: the answer has no finish_reason", retryable=True)
    return state


async def _read_stream(
    name: str,
    events: AsyncIterator[ServerSentEvent],
    on_token: TokenCallback | None,
    state: _Stream | None = None,
) -> _Stream:
    """Collect a chat-completions stream into `state`; raise unless the model reported
    finishing."""
    state = _Stream() if state is None else state
    async for event in events:
        state.began = True
        if event.data.strip() == "[DONE]":
            break
        chunk = _chunk(name, event.data)
        if not isinstance(chunk, dict):
            continue
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise ProviderError(f"{name}: error during the stream: {message}", retryable=True)
        state.response_model = chunk.get("model") or state.response_model
        if isinstance(chunk.get("usage"), dict):
            state.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                state.parts.append(state.keep(content))
                if on_token is not None:
                    on_token(content)
            for number, call in enumerate(delta.get("tool_calls") or []):
                if isinstance(call, dict):
                    index = call.get("index")
                    state.add_call(index if isinstance(index, int) else number, call)
            if choice.get("finish_reason"):
                state.finish_reason = choice["finish_reason"]
    if state.finish_reason is None and not state.began:
        raise ProviderError(
            f"{name}: the server answered HTTP 200 with an empty event stream (not one "
            "event); nothing was generated",
            retryable=True,
        )
    if state.finish_reason is None:
        raise ProviderError(
            f"{name}: the stream ended before the model finished (truncated); "
            "the partial output was discarded",
            retryable=True,
        )
    return state


def _chunk(name: str, data: str) -> Any:
    """One stream chunk's JSON, read by orjson (several times faster than the standard
    library on these small objects; a chunk arrives per fragment); what orjson refuses
    (integers beyond 64 bits, NaN) goes through the standard decoder."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            return json.loads(data)
        except ValueError:
            raise ProviderError(f"{name}: unreadable stream chunk", retryable=True) from None
