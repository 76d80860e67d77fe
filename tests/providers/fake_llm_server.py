"""A local HTTP server speaking the OpenAI chat-completions and Anthropic Messages wire formats.

It checks the key and the model like the real services do, streams answers as server-sent
events, records every request, and can be told to misbehave for the next requests.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Recorded:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)  # when it arrived


@dataclass
class Fault:
    """How to misbehave on one request (fields combine)."""

    status: int | None = None  # answer with this error status
    retry_after: str | None = None  # Retry-After header on the error
    delay: float = 0.0  # wait before answering at all
    truncate: bool = False  # stream part of the text, then close without finishing
    # With truncate: cut the connection (a TCP reset), as a network failure does, instead
    # of closing it in order.
    reset: bool = False
    stall: float = 0.0  # after the first fragment, wait this long
    no_usage: bool = False  # never report token usage
    stream_error: bool = False  # send an error event in the middle of the stream
    # Echo the credential the request carried, as a careless server or proxy would:
    # "body" (a JSON error quoting the Authorization header and the key), "text" (a plain
    # text error body), "reason" (the HTTP status line), "content_type" (a 200 that is no
    # event stream, its Content-Type naming the key), "stream" (an error event mid-stream).
    echo: str | None = None
    retry_after_header: str = "Retry-After"  # e.g. LiteLLM's "llm_provider-retry-after"
    finish_reason: str | None = None  # end the stream with this finish/stop reason
    empty: bool = False  # stream no text at all, then finish normally
    json_answer: bool = False  # answer one JSON document although asked to stream
    reject_field: str | None = None  # a 400 naming this body field, if the body has it
    # Answer by asking for these tool calls, (name, arguments), instead of the reply: the
    # arguments as an object, or a string sent as written (malformed JSON, say). `tool_text`
    # is what the model says before its calls.
    tool_calls: list[tuple[str, Any]] | None = None
    tool_text: str = ""
    # Send one `data:` line of this many bytes that never ends, then close the connection.
    long_line: int = 0
    # Stream valid text deltas without end, until the client goes away.
    endless: bool = False
    # With `status`: an error body that never ends.
    endless_body: bool = False
    # Headers of a successful stream or of a 429 (rate-limit headers, say).
    headers: dict[str, str] = field(default_factory=dict)
    # Report as many output tokens as the request's max_tokens (with `finish_reason`, say
    # "end_turn": LiteLLM's Messages route states that for an answer cut at the limit).
    at_limit: bool = False
    # A 200 event stream that closes before its first event.
    empty_stream: bool = False


@dataclass
class FakeState:
    """Shared between the test and the handler threads."""

    api_key: str
    models: set[str]
    reply: list[str]
    input_tokens: int = 1000
    output_tokens: int = 500
    faults: deque[Fault] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    usage_extra: dict[str, Any] = field(default_factory=dict)  # more usage fields, as sent
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    # What the server does with a native schema (response_format json_schema, output_config):
    # "enforced" answers `reply`; "fails" answers HTTP 500, as llama-cpp-python does for a
    # schema it cannot compile; "ignored" drops the field, as LiteLLM and llama-server's
    # Anthropic route do: the model then answers `reply` only when the prompt states the
    # schema, and `prose` otherwise.
    schema_support: str = "enforced"
    prose: list[str] = field(default_factory=lambda: ["Here is my review: ", "it reads well."])


def _asks_schema(body: dict[str, Any]) -> bool:
    answer_format = body.get("response_format") or {}
    return answer_format.get("type") == "json_schema" or "format" in (
        body.get("output_config") or {}
    )


def _reply(state: FakeState, body: dict[str, Any]) -> list[str]:
    """The fragments of the answer to `body` (see `FakeState.schema_support`)."""
    if state.schema_support != "ignored" or not _asks_schema(body):
        return state.reply
    told = "JSON Schema" in json.dumps(body.get("messages") or [])
    return state.reply if told else state.prose


def _output_tokens(state: FakeState, body: dict[str, Any], fault: Fault) -> int:
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    return int(limit) if fault.at_limit and limit else state.output_tokens


def _arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _call_id(state: FakeState, index: int) -> str:
    return f"call_{len(state.requests)}_{index}"


def _openai_calls(state: FakeState, fault: Fault) -> list[dict[str, Any]]:
    return [
        {
            "id": _call_id(state, i),
            "type": "function",
            "function": {"name": name, "arguments": _arguments(args)},
        }
        for i, (name, args) in enumerate(fault.tool_calls or [])
    ]


def _anthropic_uses(state: FakeState, fault: Fault) -> list[dict[str, Any]]:
    return [
        {
            "type": "tool_use",
            "id": _call_id(state, i),
            "name": name,
            "input": args if isinstance(args, dict) else {},
        }
        for i, (name, args) in enumerate(fault.tool_calls or [])
    ]


def _openai_error(status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _openai_answer(state: FakeState, body: dict[str, Any], fault: Fault) -> dict[str, Any]:
    """A complete chat completion, as sent for ``stream: false``."""
    usage = {
        "prompt_tokens": state.input_tokens,
        "completion_tokens": state.output_tokens,
        "total_tokens": state.input_tokens + state.output_tokens,
        **state.usage_extra,
    }
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "" if fault.empty else "".join(_reply(state, body)),
    }
    finish = fault.finish_reason or "stop"
    if fault.tool_calls is not None:
        message = {
            "role": "assistant",
            "content": fault.tool_text or None,
            "tool_calls": _openai_calls(state, fault),
        }
        finish = "tool_calls"
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": body["model"],
        "choices": [choice],
        "usage": usage,
    }


def _anthropic_answer(state: FakeState, body: dict[str, Any], fault: Fault) -> dict[str, Any]:
    """A complete message, as sent without ``stream``."""
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "Let me see.", "signature": "sig"}
    ]
    stop = fault.finish_reason or "end_turn"
    if fault.tool_calls is not None:
        if fault.tool_text:
            content.append({"type": "text", "text": fault.tool_text})
        content += _anthropic_uses(state, fault)
        stop = "tool_use"
    elif not fault.empty:
        content.append({"type": "text", "text": "".join(_reply(state, body))})
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": state.input_tokens,
            "output_tokens": state.output_tokens,
            **state.usage_extra,
        },
    }


class Handler(BaseHTTPRequestHandler):
    """Answers POST /v1/chat/completions and POST /v1/messages."""

    server: FakeServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        state = self.server.state
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.loads(raw or b"{}")
        headers = {k.lower(): v for k, v in self.headers.items()}
        with state.lock:
            state.requests.append(Recorded(self.path, headers, body))
            fault = state.faults.popleft() if state.faults else Fault()
            state.in_flight += 1
            state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            if fault.delay:
                state.stopping.wait(fault.delay)
            if fault.echo is not None and fault.echo != "stream":
                return self._echo(headers, fault.echo)
            if fault.endless_body:
                return self._endless_error(fault.status or 400)
            if fault.long_line:
                return self._long_line(fault.long_line)
            if fault.endless:
                return self._endless(self.path == "/v1/messages")
            if self.path == "/v1/chat/completions":
                self._openai(state, headers, body, fault)
            elif self.path == "/v1/messages":
                self._anthropic(state, headers, body, fault)
            else:
                self._json(404, {"error": "not found"})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout tests)
        finally:
            self._done()

    def _json(
        self, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self._done()
        self.wfile.write(data)

    def _echo(self, headers: dict[str, str], where: str) -> None:
        """Refuse the request, quoting its credential back in the place `where` names."""
        sent = headers.get("authorization") or f"x-api-key {headers.get('x-api-key', '')}"
        key = sent.removeprefix("Bearer ").removeprefix("x-api-key ")
        quoted = f"you sent {sent}"
        if where == "content_type":
            self.send_response(200)
            self.send_header("Content-Type", f"text/plain; key={key}")
            self.end_headers()
            self._done()
            self.wfile.write(f"hello {quoted}".encode())
            return
        if where == "reason":
            self.send_response(403, f"Forbidden ({quoted})")
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self._done()
            self.wfile.write(f"403 Forbidden: {quoted}".encode())
            return
        if where == "text":
            data = f"upstream refused: {quoted} (key {key})".encode()
            self.send_response(400)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self._done()
            self.wfile.write(data)
            return
        error = {
            "message": f"Invalid credentials: {quoted}",
            "type": "invalid_request_error",
            "api_key": key,
            "headers": {"Authorization": headers.get("authorization", "")},
        }
        self._json(400, {"error": error})

    def _endless_error(self, status: int) -> None:
        """An error answer whose body goes on until the client stops reading."""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self._done()
        self.wfile.write(b'{"error": {"message": "')
        block = b"e" * 65536
        while not self.server.state.stopping.is_set():
            self.wfile.write(block)

    def _long_line(self, size: int) -> None:
        """One data line of `size` bytes that never ends; then the connection closes."""
        self._start_stream()
        self._done()
        self.wfile.write(b'data: {"x": "')
        block = b"a" * 65536
        for _ in range(0, size, len(block)):
            self.wfile.write(block)

    def _endless(self, anthropic: bool) -> None:
        """Valid text deltas, without end, until the client goes away."""
        self._start_stream()
        self._done()
        if anthropic:
            delta = {"type": "content_block_delta", "index": 0,
                     "delta": {"type": "text_delta", "text": "word " * 20}}  # fmt: skip
            event = f"event: content_block_delta\ndata: {json.dumps(delta)}\n\n"
        else:
            choice = {"index": 0, "delta": {"content": "word " * 20}, "finish_reason": None}
            event = f"data: {json.dumps({'model': 'gpt-test', 'choices': [choice]})}\n\n"
        batch = (event * 64).encode()
        while not self.server.state.stopping.is_set():
            self.wfile.write(batch)

    def _cut(self, fault: Fault) -> None:
        """End a stream part-way: in order, or with a reset when the fault says so."""
        if fault.reset:
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # a connection cut on purpose cannot be flushed
            super().finish()

    def _start_stream(self, extra: dict[str, str] | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes

    def _done(self) -> None:
        """The request stops counting as in flight just before its last bytes leave: the
        client can only send its next request after reading them, so none overlaps."""
        state = self.server.state
        with state.lock:
            if not getattr(self, "counted_done", False):
                state.in_flight -= 1
                self.counted_done = True

    def _send(self, data: str, event: str | None = None) -> None:
        if data == "[DONE]" or event == "message_stop":
            self._done()
        prefix = f"event: {event}\n" if event else ""
        self.wfile.write(f"{prefix}data: {data}\n\n".encode())
        self.wfile.flush()

    def _openai(
        self, state: FakeState, headers: dict[str, str], body: dict[str, Any], fault: Fault
    ) -> None:
        key = headers.get("authorization", "").removeprefix("Bearer ")
        if key != state.api_key:
            # The real service echoes (part of) the key it was given.
            message = f"Incorrect API key provided: {key}. You can find your API key at https://platform.openai.com/account/api-keys."
            return self._json(
                401, _openai_error(401, message, "invalid_request_error", "invalid_api_key")
            )
        if fault.status == 429:
            message = "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1."
            extra = {fault.retry_after_header: fault.retry_after} if fault.retry_after else {}
            return self._json(
                429,
                _openai_error(429, message, "requests", "rate_limit_exceeded"),
                {**extra, **fault.headers},
            )
        if fault.status is not None:
            message = "The server had an error while processing your request. Sorry about that!"
            extra = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            return self._json(
                fault.status, _openai_error(fault.status, message, "server_error", None), extra
            )
        if body.get("model") not in state.models:
            message = (
                f"The model `{body.get('model')}` does not exist or you do not have access to it."
            )
            return self._json(
                404, _openai_error(404, message, "invalid_request_error", "model_not_found")
            )
        if fault.reject_field is not None and fault.reject_field in body:
            message = f"Unrecognized request argument supplied: {fault.reject_field}"
            return self._json(400, _openai_error(400, message, "invalid_request_error", None))
        if state.schema_support == "fails" and _asks_schema(body):
            message = "Internal Server Error"  # what llama-cpp-python's server says
            return self._json(500, _openai_error(500, message, "internal_server_error", None))
        if fault.json_answer or body.get("stream") is not True:
            return self._json(200, _openai_answer(state, body, fault))
        self._start_stream(fault.headers)
        if fault.empty_stream:
            return self._done()
        base = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": body["model"],
        }
        first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        self._send(json.dumps({**base, "choices": [first]}))
        if fault.tool_calls is not None:
            return self._openai_tool_stream(state, body, fault, base)
        reply = _reply(state, body)
        for number, part in enumerate(reply):
            if fault.truncate and number == len(reply) // 2:
                return self._cut(fault)
            if fault.stream_error and number == 1:
                return self._send(
                    json.dumps(
                        {"error": {"message": "The server had an error", "type": "server_error"}}
                    )
                )
            if fault.echo == "stream" and number == 1:
                message = f"upstream error: you sent Bearer {key}"
                return self._send(json.dumps({"error": {"message": message, "key": key}}))
            if fault.empty:
                continue
            choice = {"index": 0, "delta": {"content": part}, "finish_reason": None}
            self._send(json.dumps({**base, "choices": [choice]}))
            if fault.stall and number == 0:
                state.stopping.wait(fault.stall)
        finish = fault.finish_reason or "stop"
        self._send(
            json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        )
        if (body.get("stream_options") or {}).get("include_usage") and not fault.no_usage:
            output_tokens = _output_tokens(state, body, fault)
            usage = {
                "prompt_tokens": state.input_tokens,
                "completion_tokens": output_tokens,
                "total_tokens": state.input_tokens + output_tokens,
                **state.usage_extra,
            }
            self._send(json.dumps({**base, "choices": [], "usage": usage}))
        self._send("[DONE]")

    def _openai_tool_stream(
        self, state: FakeState, body: dict[str, Any], fault: Fault, base: dict[str, Any]
    ) -> None:
        """Stream `fault.tool_calls` as chat-completions deltas: the id and name first, the
        arguments in two fragments, as OpenAI sends them."""

        def chunk(delta: dict[str, Any], finish: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            self._send(json.dumps({**base, "choices": [choice]}))

        if fault.tool_text:
            chunk({"content": fault.tool_text})
        for index, call in enumerate(_openai_calls(state, fault)):
            arguments = call["function"]["arguments"]
            head = {**call, "index": index, "function": {"name": call["function"]["name"]}}
            head["function"]["arguments"] = ""
            chunk({"tool_calls": [head]})
            for fragment in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        if fault.truncate:
            return
        chunk({}, "tool_calls")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": state.input_tokens,
                "completion_tokens": state.output_tokens,
                "total_tokens": state.input_tokens + state.output_tokens,
            }
            self._send(json.dumps({**base, "choices": [], "usage": usage}))
        self._send("[DONE]")

    def _anthropic_tool_stream(self, state: FakeState, fault: Fault) -> None:
        """Stream `fault.tool_calls` as Messages events: a text block when there is text,
        then a tool_use block per call with its input in two input_json_delta fragments."""
        index = 0
        if fault.tool_text:
            start = {"type": "text", "text": ""}
            self._send(
                json.dumps({"type": "content_block_start", "index": 0, "content_block": start}),
                "content_block_start",
            )
            delta = {"type": "text_delta", "text": fault.tool_text}
            self._send(
                json.dumps({"type": "content_block_delta", "index": 0, "delta": delta}),
                "content_block_delta",
            )
            self._send(json.dumps({"type": "content_block_stop", "index": 0}), "content_block_stop")
            index = 1
        for number, (use, (_, args)) in enumerate(
            zip(_anthropic_uses(state, fault), fault.tool_calls or [], strict=True)
        ):
            at = index + number
            block = {**use, "input": {}}
            self._send(
                json.dumps({"type": "content_block_start", "index": at, "content_block": block}),
                "content_block_start",
            )
            text = _arguments(args)
            for fragment in (text[: len(text) // 2], text[len(text) // 2 :]):
                delta = {"type": "input_json_delta", "partial_json": fragment}
                self._send(
                    json.dumps({"type": "content_block_delta", "index": at, "delta": delta}),
                    "content_block_delta",
                )
            self._send(
                json.dumps({"type": "content_block_stop", "index": at}), "content_block_stop"
            )
        if fault.truncate:
            return
        delta_event = {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": state.output_tokens},
        }
        self._send(json.dumps(delta_event), "message_delta")
        self._send(json.dumps({"type": "message_stop"}), "message_stop")

    def _anthropic(
        self, state: FakeState, headers: dict[str, str], body: dict[str, Any], fault: Fault
    ) -> None:
        key = headers.get("x-api-key", "")
        if key != state.api_key:
            return self._json(401, _anthropic_error("authentication_error", "invalid x-api-key"))
        if fault.status == 429:
            extra = {fault.retry_after_header: fault.retry_after} if fault.retry_after else {}
            return self._json(
                429,
                _anthropic_error(
                    "rate_limit_error",
                    "Number of request tokens has exceeded your per-minute rate limit",
                ),
                extra,
            )
        if fault.status is not None:
            kind = "overloaded_error" if fault.status == 529 else "api_error"
            return self._json(
                fault.status,
                _anthropic_error(
                    kind, "Overloaded" if fault.status == 529 else "Internal server error"
                ),
            )
        if "max_tokens" not in body:
            return self._json(
                400, _anthropic_error("invalid_request_error", "max_tokens: Field required")
            )
        if body.get("model") not in state.models:
            return self._json(
                404, _anthropic_error("not_found_error", f"model: {body.get('model')}")
            )
        if fault.reject_field is not None and fault.reject_field in body:
            refusal = f"{fault.reject_field}: Extra inputs are not permitted"
            return self._json(400, _anthropic_error("invalid_request_error", refusal))
        if state.schema_support == "fails" and _asks_schema(body):
            return self._json(500, _anthropic_error("api_error", "Internal server error"))
        if fault.json_answer or body.get("stream") is not True:
            return self._json(200, _anthropic_answer(state, body, fault))
        self._start_stream()
        if fault.empty_stream:
            return self._done()
        message = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": body["model"],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": state.input_tokens, "output_tokens": 1, **state.usage_extra},
        }
        self._send(json.dumps({"type": "message_start", "message": message}), "message_start")
        if fault.tool_calls is not None:
            return self._anthropic_tool_stream(state, fault)
        start = {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": ""},
        }
        self._send(json.dumps(start), "content_block_start")
        self._send(json.dumps({"type": "ping"}), "ping")
        reply = _reply(state, body)
        for number, part in enumerate(reply):
            if fault.truncate and number == len(reply) // 2:
                return self._cut(fault)
            if fault.stream_error and number == 1:
                return self._send(
                    json.dumps(_anthropic_error("overloaded_error", "Overloaded")), "error"
                )
            if fault.echo == "stream" and number == 1:
                error = _anthropic_error("api_error", f"proxy said: x-api-key: {key}")
                return self._send(json.dumps(error), "error")
            if fault.empty:
                continue
            delta = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": part},
            }
            self._send(json.dumps(delta), "content_block_delta")
            if fault.stall and number == 0:
                state.stopping.wait(fault.stall)
        self._send(json.dumps({"type": "content_block_stop", "index": 0}), "content_block_stop")
        usage = {} if fault.no_usage else {"output_tokens": _output_tokens(state, body, fault)}
        delta_event = {
            "type": "message_delta",
            "delta": {"stop_reason": fault.finish_reason or "end_turn", "stop_sequence": None},
            "usage": usage,
        }
        self._send(json.dumps(delta_event), "message_delta")
        self._send(json.dumps({"type": "message_stop"}), "message_stop")


class FakeServer(ThreadingHTTPServer):
    """The server; `state` is what tests configure and inspect."""

    daemon_threads = True

    def __init__(self, state: FakeState) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.state = state

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.server_address[1]}"

    def fail_next(self, *faults: Fault) -> None:
        """Misbehave on the next requests, one fault per request."""
        with self.state.lock:
            self.state.faults.extend(faults)

    @property
    def requests(self) -> list[Recorded]:
        """Every request received so far."""
        with self.state.lock:
            return list(self.state.requests)
