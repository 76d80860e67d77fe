"""An OpenAI Agents SDK `ModelProvider` whose calls go through interlock.

    from agents import Agent, RunConfig, Runner
    from interlock.agents.openai_agents import InterlockModelProvider

    async def research(ctx):
        agent = Agent(name="researcher", model="sonnet", instructions="Be brief.")
        config = RunConfig(model_provider=InterlockModelProvider(ctx))
        result = await Runner.run(agent, ctx.task, run_config=config)
        return result.final_output

An agent's `model` names an interlock alias (`default` when it names none). The SDK's own
chat-completions model converts the agent's items, tools and handoffs to chat messages as
usual, and sends each request to `ctx.async_model(alias).chat.completions.create`: the alias
of interlock.toml with its provider, retries, prices and spend caps, held to the run's
budget, journaled (an attempt after a failed or killed one replays the turns that one paid
for) and counted in the attempt's usage. Streaming (`Runner.run_streamed`) is not supported:
each answer comes whole.
"""

from __future__ import annotations

from typing import Any

from agents.models.interface import Model, ModelProvider
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel

from interlock.runtime.executors import TaskContext
from interlock.runtime.model_calls import AsyncModelClient, ModelCallError

# What the SDK sends that interlock sets itself: its own headers (a User-Agent), and query
# parameters, which no provider here takes.
_DROPPED = frozenset({"extra_headers", "extra_query"})
# What `ctx.model`'s `chat.completions.create` sends on (the rest of the SDK's model
# settings have no request setting in interlock).
_SENT = frozenset(
    {"model", "messages", "tools", "tool_choice", "response_format", "temperature", "top_p",
     "max_tokens", "reasoning_effort", "seed", "stop", "extra_body"}
)  # fmt: skip


def _given(value: Any) -> bool:
    """Whether the SDK gave a value (not its `omit` / `NOT_GIVEN` sentinel, nor None)."""
    return value is not None and type(value).__name__ not in ("Omit", "NotGiven")


class _Completions:
    def __init__(self, client: AsyncModelClient) -> None:
        self._client = client

    async def create(self, **kwargs: Any) -> Any:
        params = {k: v for k, v in kwargs.items() if k not in _DROPPED and _given(v)}
        if not params.get("extra_body"):
            params.pop("extra_body", None)
        unsent = sorted(set(params) - _SENT)
        if unsent:
            # An agent without a model gets the SDK's defaults for its own default model.
            raise ModelCallError(
                f"the agent's model settings hold {', '.join(unsent)}, which interlock does "
                "not send: name an alias as the agent's model (Agent(model='sonnet', ...)), "
                "whose settings start empty, or leave them out of its model_settings",
                retryable=False,
            )
        return await self._client.create(**params)


class _Chat:
    def __init__(self, client: AsyncModelClient) -> None:
        self.completions = _Completions(client)


class _Client:
    """What the SDK's chat-completions model asks of its `AsyncOpenAI` client."""

    # Not OpenAI's own address: the SDK then sends no OpenAI-only parameters (`store`).
    base_url = "interlock://models/"

    def __init__(self, client: AsyncModelClient) -> None:
        self.chat = _Chat(client)


class InterlockModelProvider(ModelProvider):  # type: ignore[misc]  # untyped without the SDK
    """Models of interlock aliases for the agents of the `call:` worker of `ctx`.

    Args:
        ctx: The worker's `TaskContext`.
        default: The alias of an agent whose `model` names none.
        fallbacks: Aliases tried in order when a call fails.
    """

    def __init__(
        self, ctx: TaskContext, default: str | None = None, *, fallbacks: tuple[str, ...] = ()
    ) -> None:
        self._ctx = ctx
        self._default = default
        self._fallbacks = fallbacks

    def get_model(self, model_name: str | None) -> Model:
        """The SDK's chat-completions model, its requests sent through `ctx.async_model`."""
        alias = model_name or self._default
        if not alias:
            raise ModelCallError(
                "InterlockModelProvider: the agent names no model and no default alias was "
                "given: pass default='<alias>' or set the agent's model to an alias of "
                "interlock.toml",
                retryable=False,
            )
        client = _Client(self._ctx.async_model(alias, fallbacks=self._fallbacks))
        return OpenAIChatCompletionsModel(model=alias, openai_client=client)
