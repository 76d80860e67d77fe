"""Model calls made from a `call:` worker's own Python code: `ctx.model(alias)`.

A client from `ctx.model("sonnet")` (or `ctx.async_model`) calls the model behind the alias
the way a `model:` worker does: the alias resolved from interlock.toml with its settings and
prices, the provider's retries and rate limits, the `[limits]` spend caps, keys masked in
what is kept. Each call also:

- is held to the run's cost and token budget: a call that could take the run past what was
  left when the attempt started is refused (`BudgetExceeded`);
- is journaled (`interlock.runtime.call_journal`): a later attempt of the task that sends the
  same request gets the recorded answer back instead of paying again;
- adds its tokens and cost to the attempt's usage, which the ledger records with the
  attempt's result, so status, budgets and the dashboard count it.

`ctx.record_usage` adds the usage of calls made some other way.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from interlock.core.params import RequestSettings
from interlock.providers.base import ModelRequest, ModelResult, ProviderError, ToolCall, ToolTurn
from interlock.providers.prompt import estimate_tokens
from interlock.providers.redaction import Secret, mask_keys, scrub
from interlock.providers.request import unsupported
from interlock.providers.spend import worst_case_usd
from interlock.providers.usage import MAX_STEPS
from interlock.runtime.call_journal import CallJournal, request_key
from interlock.runtime.call_messages import (
    MessageError,
    chat_completion,
    finish_reason,
    openai_shaped,
    split_messages,
    tool_specs,
)

if TYPE_CHECKING:
    from interlock.providers.settings import ResolvedModel
    from interlock.runtime.executors import TaskSpec
    from interlock.runtime.models import ModelRunner

Messages = Sequence[Mapping[str, Any]]


# Where `record_usage` looks a model name up when it names no alias: the providers whose
# price tables know their models by name.
_PRICED_AT = ("https://api.openai.com/v1", "https://api.anthropic.com/v1")


class ModelCallError(Exception):
    """A model call from a `call:` worker failed; `retryable` says whether another attempt
    of the task may succeed (the worker's `retries` decide)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class BudgetExceeded(ModelCallError):
    """The call could take the run past its budget: it was not sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


@dataclass(frozen=True, kw_only=True)
class Completion:
    """What one call answered.

    Attributes:
        text: The answer's text.
        tool_calls: The calls the model asked for instead of finishing, if any.
        finish_reason: Why the answer ended, in OpenAI's words (stop, length, tool_calls).
        alias: The alias that answered (a fallback's, when the first failed).
        model: The provider's model id.
        usage: What the ledger records of the call (tokens, cost, who answered).
        replayed: The answer was recorded by an earlier attempt and not paid again.
    """

    text: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    alias: str
    model: str
    usage: dict[str, Any]
    replayed: bool = False


# Request settings a call may pass as keyword arguments, by their OpenAI names too.
_SETTING_ALIASES = {"max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens"}


def call_settings(params: Mapping[str, Any]) -> RequestSettings | None:
    """The request settings among a call's keyword arguments (None when it gives none).

    Raises:
        ModelCallError: A keyword that is no request setting.
    """
    given = {_SETTING_ALIASES.get(k, k): v for k, v in params.items() if v is not None}
    if not given:
        return None
    try:
        return RequestSettings.model_validate(given)
    except ValueError as exc:
        raise ModelCallError(f"ctx.model: {exc}", retryable=False) from None


class ModelCalls:
    """The model calls of one attempt of a `call:` worker: its journal and its usage."""

    def __init__(
        self, spec: TaskSpec, models: ModelRunner, loop: asyncio.AbstractEventLoop | None
    ) -> None:
        self.spec = spec
        self.models = models
        self.loop = loop
        self.journal = CallJournal(
            spec.run_dir / "journal" / f"{spec.task_id}.calls.jsonl", spec.attempt
        )
        # Calls paid by an attempt that never reported (killed): this attempt counts them.
        self.usages: list[dict[str, Any]] = self.journal.unreported()
        # Each call this attempt made, with its times: the trace's `chat` spans.
        self.steps: list[dict[str, Any]] = []
        self.recovered = len(self.usages)
        self.replayed = 0
        self.number = 0

    def _keys(self, model: ResolvedModel | None) -> list[Secret]:
        keys = self.models.secrets(self.spec.workflow_dir)
        headers = (model.settings.headers or {}) if model is not None else {}
        return keys + [Secret(v) for v in headers.values() if len(v) >= 8]

    async def call(
        self,
        alias: str,
        *,
        system: str,
        prompt: str,
        turns: tuple[ToolTurn, ...] = (),
        tools: Sequence[Mapping[str, Any]] | None = None,
        schema: dict[str, Any] | None = None,
        settings: RequestSettings | None = None,
        fallbacks: Sequence[str] = (),
    ) -> Completion:
        """One call through interlock's providers: `alias`, then each of `fallbacks` while
        the one before fails.

        Raises:
            ModelCallError: Every alias failed, or the call cannot be made.
            BudgetExceeded: The call could take the run past its budget.
        """
        self.number += 1
        failure: ModelCallError | None = None
        for name in (alias, *fallbacks):
            try:
                return await self._call_one(
                    name, system, prompt, turns, tool_specs(tools), schema, settings
                )
            except BudgetExceeded:
                raise
            except ModelCallError as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def _call_one(
        self,
        alias: str,
        system: str,
        prompt: str,
        turns: tuple[ToolTurn, ...],
        tools: tuple[Any, ...],
        schema: dict[str, Any] | None,
        settings: RequestSettings | None,
    ) -> Completion:
        from interlock.providers.factory import build_provider
        from interlock.runtime.models import call_timeout, usage_of

        where = f"ctx.model({alias!r})"
        try:
            resolved = self.models.resolve(alias, self.spec.workflow_dir)
            model = resolved.model.with_params(settings)
            provider = resolved.provider
            if model.batch is not None:  # a call from code waits for no provider batch
                model = replace(model, batch=None)
                if model.pricing is not None:  # and costs the price of the tier it is sent at
                    model = model.priced(model.pricing)
                provider = build_provider(model, self.models.config(self.spec.workflow_dir))
        except Exception as exc:  # configuration problems: the message says where
            raise ModelCallError(f"{where}: {exc}", retryable=False) from None
        refused = unsupported(model.kind, model.settings)
        if refused is not None:
            raise ModelCallError(f"{where} ({model.provider}): {refused}", retryable=False)
        spec = self.spec
        request = ModelRequest(
            alias=alias,
            model=model.model,
            system=system,
            prompt=prompt,
            timeout=call_timeout(model, spec.worker.timeout),
            idempotency_key=f"{spec.idempotency_key}-{self.number}",
            max_output_tokens=model.max_output_tokens,
            settings=model.settings,
            response_schema=schema,
            tools=tools,
            turns=turns,
            pipeline=spec.pipeline,
            run_id=spec.run_id,
            task_id=spec.task_id,
        )
        key = request_key(request)
        recorded = self.journal.replay(key)
        if recorded is not None:
            self.replayed += 1
            await asyncio.to_thread(self._note, request, recorded, True)
            return _completion(recorded, alias, usage_of(recorded, alias, model), replayed=True)
        self._check_budget(model, request)
        began = time.time()
        try:
            result = await provider.complete(request)
        except ProviderError as exc:
            if exc.answered is not None:  # answered but unusable: paid all the same
                self.usages.append(usage_of(exc.answered, alias, model))
            message = scrub(str(exc), self._keys(model))
            raise ModelCallError(f"{where}: {message}", retryable=exc.retryable) from None
        usage = usage_of(result, alias, model)
        self.usages.append(usage)
        self._step(began, result, usage)
        kept = self._masked(result, model)
        await asyncio.to_thread(self.journal.record, key, kept, usage)
        await asyncio.to_thread(self._note, request, kept, False)
        return _completion(result, alias, usage)

    def _step(self, began: float, result: ModelResult, usage: dict[str, Any]) -> None:
        """Keep a call's times and figures for the attempt's trace (at most `MAX_STEPS`)."""
        if len(self.steps) < MAX_STEPS:
            self.steps.append(
                {
                    "kind": "chat",
                    "at": began,
                    "s": round(result.latency_s, 4),
                    "model": result.model,
                    "input_tokens": result.input_tokens,
                    "output_tokens": result.output_tokens,
                    "finish_reason": result.finish_reason,
                    "cost_usd": usage.get("cost_usd"),
                }
            )

    def _note(self, request: ModelRequest, result: ModelResult, replayed: bool) -> None:
        """Append the call to the attempt's record, ``prompts/<task>.<attempt>.md`` (shown by
        `interlock explain --prompts` and the dashboard; masked when the attempt ends)."""
        spec = self.spec
        path = spec.run_dir / "prompts" / f"{spec.task_id}.{spec.attempt}.md"
        said = f"{result.finish_reason}, {result.input_tokens} + {result.output_tokens} tokens"
        how = "replayed from the journal, not paid again" if replayed else said
        lines = [f"## Call {self.number}: `{request.alias}` -> {result.provider}:{result.model}"]
        if request.system:
            lines += ["", "**System**", "", _clip(request.system)]
        lines += ["", "**User**", "", _clip(request.prompt)]
        for turn in request.turns:
            for call in turn.calls:
                lines += ["", f"(called `{call.name}` with {_clip(call.arguments, 2000)})"]
            for answer in turn.results:
                lines += ["", f"(result: {_clip(answer.content, 2000)})"]
        lines += ["", f"**Answer** ({how})", "", _clip(result.text)]
        lines += [f"(asks for `{call.name}` with {_clip(call.arguments, 2000)})"
                  for call in result.tool_calls]  # fmt: skip
        new = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            if new:
                handle.write("# Model calls of the attempt (ctx.model)\n\n")
            handle.write("\n".join(lines) + "\n\n")

    def _masked(self, result: ModelResult, model: ResolvedModel) -> ModelResult:
        """The result as the journal keeps it: every key the configuration reaches masked."""
        keys = self._keys(model)
        calls = tuple(
            replace(call, arguments=mask_keys(call.arguments, keys)) for call in result.tool_calls
        )
        return replace(result, text=mask_keys(result.text, keys), tool_calls=calls)

    def _check_budget(self, model: ResolvedModel, request: ModelRequest) -> None:
        """Refuse a call the run's budget has no room for (what was left when the attempt
        started, less what its calls spent since)."""
        left_usd, left_tokens = self.spec.budget_usd_left, self.spec.budget_tokens_left
        spent = sum(float(u.get("cost_usd") or 0.0) for u in self.usages)
        tokens = sum(int(u.get("input_tokens") or 0) + int(u.get("output_tokens") or 0)
                     for u in self.usages)  # fmt: skip
        where = f"ctx.model({request.alias!r})"
        if left_tokens is not None and tokens >= left_tokens:
            raise BudgetExceeded(
                f"{where}: the run's token budget is used up ({tokens} tokens spent by this "
                f"attempt, {left_tokens} were left): raise budget.max_tokens in the workflow"
            )
        if left_usd is None:
            return
        prompt = [request.system, request.prompt, *(t.text for t in request.turns)]
        prompt += [r.content for t in request.turns for r in t.results]
        worst = worst_case_usd(
            input_tokens=sum(estimate_tokens(text) for text in prompt),
            output_tokens=request.max_output_tokens,
            rates=model.rates(),
        )
        if spent >= left_usd or (math.isfinite(worst) and spent + worst > left_usd):
            shown = f"; this call may cost up to ${worst:.4f}" if math.isfinite(worst) else ""
            raise BudgetExceeded(
                f"{where}: the run's budget has no room for this call (${left_usd:.4f} was "
                f"left, this attempt spent ${spent:.4f}{shown}): raise budget.max_cost_usd "
                "in the workflow"
            )

    def record_usage(
        self,
        *,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float | None = None,
        provider: str = "",
    ) -> dict[str, Any]:
        """Add a call made some other way; priced from the alias `model` of interlock.toml,
        or the price table, when `cost_usd` is not given."""
        unpriced = False
        if cost_usd is None:
            cost_usd, unpriced = self._price(model, input_tokens, output_tokens)
        usage: dict[str, Any] = {
            "model": model,
            "provider": provider or "recorded",
            "alias": model,
            "input_tokens": int(input_tokens),
            "output_tokens": int(output_tokens),
            "cost_usd": float(cost_usd),
            "recorded": True,
            **({"unpriced": True} if unpriced else {}),
        }
        self.usages.append(usage)
        return usage

    def _price(self, model: str, input_tokens: int, output_tokens: int) -> tuple[float, bool]:
        from interlock.providers.prices import default_prices

        try:
            resolved = self.models.config(self.spec.workflow_dir).resolve(model)
        except Exception:  # not an alias here: the price table by the model's name
            resolved = None
        if resolved is None or resolved.offline_fallback:
            # No alias of that name (without a config every name "resolves" to the offline
            # stand-in): the price tables of the providers that sell a model of that name.
            for base_url in _PRICED_AT:
                rates = default_prices(model, base_url)
                if rates:
                    cost = input_tokens * rates.get("input_price_per_mtok", 0.0)
                    cost += output_tokens * rates.get("output_price_per_mtok", 0.0)
                    return cost / 1_000_000, False
            return 0.0, True
        if not resolved.price_source and resolved.kind != "offline":
            return 0.0, True
        return resolved.cost_usd(input_tokens, output_tokens), False

    def usage(self) -> dict[str, Any] | None:
        """The attempt's usage for the ledger: the sum over its calls, by alias too."""
        if not self.usages and not self.replayed:
            return None
        by_alias: dict[str, dict[str, Any]] = {}
        total: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
        for usage in self.usages:
            alias = str(usage.get("alias") or usage.get("model") or "?")
            entry = by_alias.setdefault(
                alias, {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
            )
            entry["calls"] += 1
            for name in ("input_tokens", "output_tokens", "cost_usd"):
                entry[name] += usage.get(name) or 0
                total[name] += usage.get(name) or 0
        first = self.usages[0] if self.usages else {}
        return {
            "model": first.get("model", ""),
            "provider": first.get("provider", ""),
            "alias": first.get("alias", ""),
            **total,
            "calls": len(self.usages),
            "replayed": self.replayed,
            **({"recovered": self.recovered} if self.recovered else {}),
            "by_alias": by_alias,
            **({"unpriced": True} if any(u.get("unpriced") for u in self.usages) else {}),
            **(
                {"unpriced_aliases": unpriced}
                if (
                    unpriced := sorted(
                        {str(u.get("alias")) for u in self.usages if u.get("unpriced")}
                    )
                )
                else {}
            ),
            **({"estimated": True} if any(u.get("estimated") for u in self.usages) else {}),
            **({"steps": self.steps} if self.steps else {}),
        }

    def settle(self) -> None:
        """The attempt ends: its usage holds every call journaled so far."""
        self.journal.settle()

    def run(self, coroutine: Any) -> Any:
        """Run a call from a worker's thread on the event loop its providers belong to."""
        if self.loop is None:
            return asyncio.run(coroutine)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            coroutine.close()
            raise ModelCallError(
                "ctx.model(...) was called from a coroutine: in an `async def` worker use "
                "`ctx.async_model(...)` and await its calls",
                retryable=False,
            )
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


RECORD_CHARS = 64 * 1024  # of one text in the attempt's record of its calls


def _clip(text: str, limit: int = RECORD_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n... ({len(text) - limit:,} more characters not shown)"


def _completion(
    result: ModelResult, alias: str, usage: dict[str, Any], *, replayed: bool = False
) -> Completion:
    return Completion(
        text=result.text,
        tool_calls=result.tool_calls,
        finish_reason=finish_reason(result),
        alias=alias,
        model=result.model,
        usage=usage,
        replayed=replayed,
    )


def _request(prompt: str | Messages, system: str | None) -> tuple[str, str, tuple[ToolTurn, ...]]:
    if isinstance(prompt, str):
        return system or "", prompt, ()
    try:
        got_system, text, turns = split_messages(prompt)
    except MessageError as exc:
        raise ModelCallError(f"ctx.model: {exc}", retryable=False) from None
    return "\n\n".join(s for s in (system, got_system) if s), text, turns


class AsyncModelClient:
    """`ctx.async_model(alias)`: calls to be awaited (see the module docstring).

    `complete` takes a prompt or OpenAI-shaped messages; `chat.completions.create` is the
    OpenAI SDK's call, answering its `ChatCompletion` (or the same attributes when the
    `openai` package is not installed).
    """

    def __init__(self, calls: ModelCalls, alias: str, fallbacks: Sequence[str] = ()) -> None:
        self.calls = calls
        self.alias = alias
        self.fallbacks = tuple(fallbacks)
        self.chat = _Chat(self)

    async def complete(
        self,
        prompt: str | Messages,
        *,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        schema: dict[str, Any] | None = None,
        **settings: Any,
    ) -> Completion:
        """One call; `settings` are request settings (temperature, max_output_tokens, ...).

        Raises:
            ModelCallError: The call failed (its message says why).
            BudgetExceeded: The run's budget has no room for it.
        """
        system_text, text, turns = _request(prompt, system)
        call = self.calls.call(
            self.alias,
            system=system_text,
            prompt=text,
            turns=turns,
            tools=tools,
            schema=schema,
            settings=call_settings(settings),
            fallbacks=self.fallbacks,
        )
        loop = self.calls.loop
        if loop is None or asyncio.get_running_loop() is loop:
            return await call
        # Awaited on a loop of the worker's own (a framework's `run_sync` in a plain
        # function): the call runs on the loop the providers' connections belong to.
        completion: Completion = await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(call, loop)
        )
        return completion

    async def create(self, *, messages: Messages, model: str | None = None, **params: Any) -> Any:
        """`chat.completions.create`: the alias `model` (this client's when not given)."""
        if params.pop("stream", None):
            raise ModelCallError(
                "ctx.model: chat.completions.create(stream=True) is not supported; the "
                "answer comes whole",
                retryable=False,
            )
        tools = params.pop("tools", None)
        params.pop("tool_choice", None)  # "auto" is what interlock sends
        params.pop("n", None)
        schema = _schema(params.pop("response_format", None))
        client = self if model in (None, self.alias) else AsyncModelClient(self.calls, model)
        completion = await client.complete(messages, tools=tools, schema=schema, **params)
        data = chat_completion(_as_result(completion), alias=completion.alias,
                               number=self.calls.number)  # fmt: skip
        return openai_shaped(data)


def _schema(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, Mapping) or response_format.get("type") != "json_schema":
        return None
    schema = (response_format.get("json_schema") or {}).get("schema")
    return dict(schema) if isinstance(schema, Mapping) else None


def _as_result(completion: Completion) -> ModelResult:
    usage = completion.usage
    return ModelResult(
        text=completion.text,
        provider=str(usage.get("provider", "")),
        model=completion.model,
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        latency_s=0.0,
        cost_usd=float(usage.get("cost_usd") or 0.0),
        finish_reason=completion.finish_reason,
        tool_calls=completion.tool_calls,
        cache_read_tokens=int(usage.get("cache_read_tokens") or 0),
        reasoning_tokens=int(usage.get("reasoning_tokens") or 0),
    )


class _Chat:
    def __init__(self, client: Any) -> None:
        self.completions = client


class ModelClient:
    """`ctx.model(alias)`: the same calls as `AsyncModelClient`, for plain functions (which
    run in a thread: each call runs on the event loop and the thread waits for it)."""

    def __init__(self, calls: ModelCalls, alias: str, fallbacks: Sequence[str] = ()) -> None:
        self._async = AsyncModelClient(calls, alias, fallbacks)
        self.alias = alias
        self.chat = _Chat(_SyncCompletions(self._async))

    def complete(
        self,
        prompt: str | Messages,
        *,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        schema: dict[str, Any] | None = None,
        **settings: Any,
    ) -> Completion:
        """See `AsyncModelClient.complete`."""
        coroutine = self._async.complete(
            prompt, system=system, tools=tools, schema=schema, **settings
        )
        result: Completion = self._async.calls.run(coroutine)
        return result


class _SyncCompletions:
    def __init__(self, client: AsyncModelClient) -> None:
        self._client = client

    def create(self, *, messages: Messages, model: str | None = None, **params: Any) -> Any:
        return self._client.calls.run(self._client.create(messages=messages, model=model, **params))
