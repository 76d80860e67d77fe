"""Anthropic's Messages API (``POST /v1/messages``), streamed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

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
from interlock.providers.request import anthropic_body, headers_for, streaming
from interlock.providers.settings import ResolvedModel
from interlock.providers.sse import ServerSentEvent
from interlock.providers.transport import HttpEndpoint
from interlock.providers.usage import anthropic_cache
from interlock.providers.verdict import at_limit

# Blocks of the model's reasoning, which a tool turn sends back as they came.
_THINKING = frozenset({"thinking", "redacted_thinking"})

# Errors the API reports inside a started stream that a later attempt may not hit.
_TRANSIENT_STREAM_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})


@dataclass
class _Stream:
    """What has arrived so far on one Messages stream."""

    parts: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None
    stopped: bool = False
    began: bool = False  # the server started answering
    counted: bool = False  # the server reported the output tokens (message_delta's usage)
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # tool_use blocks by their index: id, name, the input given whole and the JSON fragments.
    uses: dict[int, dict[str, Any]] = field(default_factory=dict)
    thinking: dict[int, dict[str, Any]] = field(default_factory=dict)  # blocks by index
    # The thinking and signature fragments of each block, joined once at the end: adding
    # each fragment to the text so far would copy it again per fragment.
    thoughts: dict[int, dict[str, list[str]]] = field(default_factory=dict)
    meter: AnswerMeter | None = None  # counts what is kept, against max_answer_bytes

    def keep(self, text: str) -> str:
        """`text`, counted against the answer's limit before it is kept."""
        return text if self.meter is None else self.meter.add(text)

    def start_block(self, entry: dict[str, Any]) -> dict[str, Any]:
        """A new block's entry, counted (at least `_BLOCK_ENTRY`) against the limit."""
        if self.meter is not None:
            self.meter.count(_BLOCK_ENTRY + len(json.dumps(entry, default=str)))
        return entry

    def add_thought(self, index: Any, key: str, text: str) -> None:
        """One thinking or signature fragment of the block at `index`."""
        if index in self.thinking:
            parts = self.thoughts.setdefault(index, {})
            parts.setdefault(key, []).append(self.keep(text))

    def thinking_blocks(self) -> tuple[dict[str, Any], ...]:
        """The thinking blocks in order, each with its streamed fragments joined."""
        blocks = []
        for index, block in sorted(self.thinking.items()):
            joined = dict(block)
            for key, parts in self.thoughts.get(index, {}).items():
                joined[key] = str(block.get(key) or "") + "".join(parts)
            blocks.append(joined)
        return tuple(blocks)

    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The calls the model asked for, in order."""
        return tuple(
            ToolCall(
                id=use["id"],
                name=use["name"],
                arguments="".join(use["parts"]) or json.dumps(use["input"] or {}),
            )
            for _, use in sorted(self.uses.items())
        )

    def cache(self, usage: dict[str, Any]) -> None:
        """Keep the cache figures of a usage that reports them."""
        reported = anthropic_cache(usage)
        if reported is not None:
            self.cache_read_tokens, self.cache_write_tokens = reported


# What a new content block counts against max_answer_bytes besides what it holds: a stream
# of empty blocks with new indexes must not grow without bound either.
_BLOCK_ENTRY = 256


class AnthropicProvider:
    """Calls ``POST {base_url}/v1/messages`` with ``stream: true``.

    Args:
        endpoint: The provider's shared endpoint (pool, limiter, retries).
        resolved: The alias this provider object serves, for its prices and output cap.
        api_key: Sent as ``x-api-key``.
        anthropic_version: The ``anthropic-version`` header.
        default_max_output_tokens: Sent as ``max_tokens`` (required by the API) when neither
            the request nor the alias sets a cap.
    """

    def __init__(
        self,
        *,
        endpoint: HttpEndpoint,
        resolved: ResolvedModel,
        api_key: Secret | None,
        anthropic_version: str = "2023-06-01",
        default_max_output_tokens: int = 8192,
    ) -> None:
        self.name = endpoint.name
        self._endpoint = endpoint
        self._resolved = resolved
        self._api_key = api_key
        self._version = anthropic_version
        self._default_max = default_max_output_tokens

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, alias={self._resolved.alias!r})"

    def _max_tokens(self, request: ModelRequest) -> int:
        return request.max_output_tokens or self._resolved.max_output_tokens or self._default_max

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = anthropic_body(request, max_tokens=self._max_tokens(request))
        return body

    def batch_body(self, request: ModelRequest) -> dict[str, Any]:
        """The body of `request` as a line of a batch (`interlock.providers.batch_provider`)."""
        return self._body(request)

    def batch_result(self, request: ModelRequest, answer: dict[str, Any]) -> ModelResult:
        """The result of `request` from its batch's answer, priced at the batch price."""
        read = _read_answer(self.name, answer, None)
        return self._result(request, read, time.perf_counter(), batch=True)

    def _headers(self, request: ModelRequest) -> dict[str, str]:
        headers = {"anthropic-version": self._version, "Idempotency-Key": request.idempotency_key}
        if self._api_key is not None:
            headers["x-api-key"] = self._api_key.reveal()
        if not streaming(request):
            headers["Accept"] = "application/json"
        return headers_for(request, headers)

    async def complete(
        self, request: ModelRequest, on_token: TokenCallback | None = None
    ) -> ModelResult:
        """Stream one message; see `interlock.providers.base.Provider`."""
        started = time.perf_counter()
        estimate = estimate_tokens(request.system) + estimate_tokens(request.prompt)
        estimate += self._max_tokens(request)

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
                    path="v1/messages",
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
            raise CallStopped(self._result(request, arrived, started)) from stopped
        except AnswerTooLarge as exc:
            if not arrived.began:
                raise
            # What arrived was generated, and is paid for: the failure carries its cost.
            result = self._result(request, arrived, started)
            spent = replace(result, text="", tool_calls=(), thinking=())
            raise AnswerTooLarge(str(exc), answered=spent) from None
        except ProviderError as failure:
            if not arrived.began or failure.answered is not None:
                raise
            # A stream that broke off or timed out: what arrived was generated and is paid
            # for; the failure records it (estimated unless the server sent its usage).
            result = self._result(request, arrived, started)
            failure.answered = replace(result, text="", tool_calls=(), thinking=())
            raise
        limiter.settle(estimate, stream.input_tokens + stream.output_tokens, request.model)
        return at_limit(self._result(request, stream, started), self._max_tokens(request))

    def _result(
        self, request: ModelRequest, stream: _Stream, started: float, *, batch: bool = False
    ) -> ModelResult:
        """The call's result from what arrived, priced at the tier it was sent at (`batch`:
        through the provider's batch API); a stream stopped part-way counts at least the
        text received as output."""
        text = "".join(stream.parts)
        output_tokens = stream.output_tokens
        extra: dict[str, str] = {}
        if not (stream.stopped and stream.counted):
            # Cut off before the final count, or a server that sends none (llama-server
            # and some gateways leave message_delta's usage out): count the text received.
            output_tokens = max(output_tokens, estimate_tokens(text))
            extra["usage"] = "estimated"
        return ModelResult(
            text=text,
            provider=self.name,
            model=request.model,
            input_tokens=stream.input_tokens,
            output_tokens=output_tokens,
            latency_s=time.perf_counter() - started,
            cost_usd=self._resolved.sent_with(request.settings, batch=batch).cost_usd(
                stream.input_tokens,
                output_tokens,
                cache_read_tokens=stream.cache_read_tokens,
                cache_write_tokens=stream.cache_write_tokens,
            ),
            finish_reason=stream.stop_reason or ("end_turn" if stream.stopped else "stopped"),
            cache_read_tokens=stream.cache_read_tokens,
            cache_write_tokens=stream.cache_write_tokens,
            extra=extra,
            tool_calls=stream.tool_calls(),
            thinking=stream.thinking_blocks(),
        )


def _input_tokens(usage: dict[str, Any]) -> int:
    # Cached prompt tokens are reported apart from input_tokens; they are still input.
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    return sum(v for k in keys if isinstance(v := usage.get(k), int))


def _use(block: dict[str, Any]) -> dict[str, Any]:
    """A tool_use block as the stream state keeps it."""
    return {
        "id": str(block.get("id") or ""),
        "name": str(block.get("name") or ""),
        "input": block.get("input"),
        "parts": [],
    }


def _read_answer(name: str, answer: dict[str, Any], on_token: TokenCallback | None) -> _Stream:
    """Read a complete (non-streamed) message; thinking blocks are not part of the text."""
    if answer.get("type") == "error":
        error = answer.get("error") or {}
        raise ProviderError(
            f"{name}: error in the answer: {error.get('message')} ({error.get('type')})",
            retryable=error.get("type") in _TRANSIENT_STREAM_ERRORS,
        )
    usage = answer.get("usage") or {}
    state = _Stream(
        input_tokens=_input_tokens(usage),
        output_tokens=usage.get("output_tokens", 0),
        stop_reason=answer.get("stop_reason"),
        stopped=True,
        counted=isinstance(usage.get("output_tokens"), int),
    )
    state.cache(usage)
    for index, block in enumerate(answer.get("content") or []):
        if isinstance(block, dict) and block.get("type") == "text" and block.get("text"):
            state.parts.append(block["text"])
            if on_token is not None:
                on_token(block["text"])
        elif isinstance(block, dict) and block.get("type") == "tool_use":
            state.uses[index] = _use(block)
        elif isinstance(block, dict) and block.get("type") in _THINKING:
            state.thinking[index] = dict(block)
    return state


async def _read_stream(
    name: str,
    events: AsyncIterator[ServerSentEvent],
    on_token: TokenCallback | None,
    state: _Stream | None = None,
) -> _Stream:
    """Collect a Messages stream into `state`; raise unless ``message_stop`` arrived."""
    state = _Stream() if state is None else state
    async for event in events:
        state.began = True
        try:
            payload = json.loads(event.data) if event.data else {}
        except ValueError:
            raise ProviderError(f"{name}: unreadable stream event", retryable=True) from None
        kind = payload.get("type", event.event)
        if kind == "message_start":
            usage = payload.get("message", {}).get("usage", {})
            state.input_tokens = _input_tokens(usage)
            state.output_tokens = usage.get("output_tokens", 0)
            state.cache(usage)
        elif kind == "content_block_start":
            block = payload.get("content_block") or {}
            index = payload.get("index", -1)
            if block.get("type") == "tool_use":
                state.uses[index] = state.start_block(_use(block))
            elif block.get("type") in _THINKING:
                state.thinking[index] = state.start_block(dict(block))
        elif kind == "content_block_delta":
            delta = payload.get("delta", {})
            if delta.get("type") == "text_delta" and delta.get("text"):
                state.parts.append(state.keep(delta["text"]))
                if on_token is not None:
                    on_token(delta["text"])
            elif delta.get("type") == "input_json_delta":
                use = state.uses.get(payload.get("index", -1))
                if use is not None and isinstance(delta.get("partial_json"), str):
                    use["parts"].append(state.keep(delta["partial_json"]))
            elif delta.get("type") in ("thinking_delta", "signature_delta"):
                key = "thinking" if delta["type"] == "thinking_delta" else "signature"
                if isinstance(delta.get(key), str):
                    state.add_thought(payload.get("index", -1), key, delta[key])
        elif kind == "message_delta":
            state.stop_reason = payload.get("delta", {}).get("stop_reason") or state.stop_reason
            usage = payload.get("usage", {})
            if isinstance(usage.get("output_tokens"), int):
                state.output_tokens = usage["output_tokens"]
                state.counted = True
            state.input_tokens = _input_tokens(usage) or state.input_tokens
            state.cache(usage)
        elif kind == "message_stop":
            state.stopped = True
            break
        elif kind == "error":
            error = payload.get("error", {})
            raise ProviderError(
                f"{name}: error during the stream: {error.get('message')} ({error.get('type')})",
                retryable=error.get("type") in _TRANSIENT_STREAM_ERRORS,
            )
    if not state.stopped and not state.began:
        raise ProviderError(
            f"{name}: the server answered HTTP 200 with an empty event stream (not one "
            "event); nothing was generated",
            retryable=True,
        )
    if not state.stopped:
        raise ProviderError(
            f"{name}: the stream ended before message_stop (truncated); "
            "the partial output was discarded",
            retryable=True,
        )
    return state
