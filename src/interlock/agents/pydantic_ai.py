"""A Pydantic AI `Model` whose calls go through interlock: `InterlockModel(ctx, "sonnet")`.

    from pydantic_ai import Agent
    from interlock.agents.pydantic_ai import InterlockModel

    async def research(ctx):
        agent = Agent(InterlockModel(ctx, "sonnet"), instructions="Be brief.")
        result = await agent.run(ctx.task)
        return result.output

Each request of the agent is one call of `ctx.async_model(alias)`: the alias of interlock.toml
with its provider, retries, prices and spend caps, held to the run's budget, journaled (an
attempt after a failed or killed one replays the turns that one paid for) and counted in the
attempt's usage. The agent's tools run in the worker as usual; their calls and results are
sent to the model in the OpenAI or Anthropic wire format, as the alias's provider speaks.
Streaming (`agent.run_stream`) is not supported: each answer comes whole.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from interlock.runtime.executors import TaskContext
from interlock.runtime.model_calls import AsyncModelClient

# Pydantic AI's model settings that interlock's request settings send, by their names there.
_SETTINGS = {
    "max_tokens": "max_output_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "stop_sequences": "stop",
}


class InterlockModel(Model):
    """A Pydantic AI model calling the interlock alias `alias` for the `call:` worker of `ctx`.

    Args:
        ctx: The worker's `TaskContext`.
        alias: A model alias of interlock.toml.
        fallbacks: Aliases tried in order when a call fails.
        settings: Pydantic AI model settings used by default for this model.
    """

    def __init__(
        self,
        ctx: TaskContext,
        alias: str,
        *,
        fallbacks: tuple[str, ...] = (),
        settings: ModelSettings | None = None,
    ) -> None:
        super().__init__(settings=settings)
        self._client: AsyncModelClient = ctx.async_model(alias, fallbacks=fallbacks)
        self._alias = alias

    @property
    def model_name(self) -> str:
        """The interlock alias."""
        return self._alias

    @property
    def system(self) -> str:
        """The provider name Pydantic AI reports: interlock, which routes the calls."""
        return "interlock"

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """One call through `ctx.async_model`; see Pydantic AI's `Model.request`."""
        model_settings, params = self.prepare_request(model_settings, model_request_parameters)
        chat = chat_messages(messages)
        extra = params.prompted_output_instructions
        if extra:
            chat.insert(0, {"role": "system", "content": extra})
        tools = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description or "",
                    "parameters": tool.parameters_json_schema,
                },
            }
            for tool in params.declared_tool_defs.values()
        ]
        schema = None
        if params.output_mode == "native" and params.output_object is not None:
            schema = dict(params.output_object.json_schema)
        given = dict(model_settings or {})
        settings: dict[str, Any] = {n: given[k] for k, n in _SETTINGS.items() if k in given}
        completion = await self._client.complete(
            chat, tools=tools or None, schema=schema, **settings
        )
        parts: list[ModelResponsePart] = []
        if completion.text:
            parts.append(TextPart(content=completion.text))
        parts += [
            ToolCallPart(tool_name=call.name, args=call.arguments or "{}", tool_call_id=call.id)
            for call in completion.tool_calls
        ]
        usage = completion.usage
        return ModelResponse(
            parts=parts,
            usage=RequestUsage(
                input_tokens=int(usage.get("input_tokens") or 0),
                output_tokens=int(usage.get("output_tokens") or 0),
            ),
            model_name=completion.model,
            provider_name=self.system,
            finish_reason=_finish(completion.finish_reason),
        )


def _finish(reason: str) -> Any:
    known = {"stop": "stop", "length": "length", "tool_calls": "tool_call",
             "content_filter": "content_filter"}  # fmt: skip
    return known.get(reason)


def chat_messages(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """A Pydantic AI conversation as OpenAI-shaped chat messages (what `ctx.model` takes)."""
    chat: list[dict[str, Any]] = []
    instructions = next(
        (m.instructions for m in reversed(messages) if isinstance(m, ModelRequest)), None
    )
    if instructions:
        chat.append({"role": "system", "content": instructions})
    for message in messages:
        if isinstance(message, ModelRequest):
            chat += _request_messages(message)
        elif isinstance(message, ModelResponse):
            chat.append(_response_message(message))
    return chat


def _request_messages(message: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in message.parts:
        kind = getattr(part, "part_kind", "")
        if kind == "system-prompt":
            out.append({"role": "system", "content": part.content})  # type: ignore[union-attr]
        elif kind == "user-prompt":
            content: Any = part.content  # type: ignore[union-attr]
            text = content if isinstance(content, str) else _user_text(content)
            out.append({"role": "user", "content": text})
        elif kind == "tool-return":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": part.tool_call_id,  # type: ignore[union-attr]
                    "content": part.model_response_str(),  # type: ignore[union-attr]
                }
            )
        elif kind in ("retry-prompt", "retry-feedback"):
            said = part.model_response()  # type: ignore[union-attr]
            call_id = getattr(part, "tool_call_id", None)
            if call_id and getattr(part, "tool_name", None):
                out.append({"role": "tool", "tool_call_id": call_id, "content": said})
            else:
                out.append({"role": "user", "content": said})
    return out


def _user_text(content: Sequence[Any]) -> str:
    return "\n".join(item for item in content if isinstance(item, str))


def _response_message(message: ModelResponse) -> dict[str, Any]:
    text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
    calls = [
        {
            "id": part.tool_call_id,
            "type": "function",
            "function": {"name": part.tool_name, "arguments": _arguments(part.args)},
        }
        for part in message.parts
        if isinstance(part, ToolCallPart)
    ]
    out: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        out["tool_calls"] = calls
    return out


def _arguments(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(args or {})
