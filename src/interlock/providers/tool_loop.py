"""A model worker's tool loop: call the model, run the tools it asks for, call it again.

Bounded by `max_turns` model calls within one attempt. The loop's tokens and cost are those
of every call summed, recorded as one call's usage is; what each turn said and every tool call
and result are handed to `record` as they happen, so the attempt's transcript is complete
also when the loop fails part-way. The output is still only the model's last answer.

With a `Journal`, each model answer that asks for tools and each tool result is recorded as
it completes, and a loop given the turns an earlier attempt recorded continues after them:
those model calls and tool calls are not made again, and their spend is not counted again.
Each tool call carries an idempotency key, ``<run>/<task>/<turn>/<call>``, stable across
attempts, which the tool server sees in the request's metadata.

A call of a tool its server's `approve` lists is made only once a person approved it
(`decisions`, by ``"<turn>/<call>"``): until then the loop stops there, raising
`ApprovalNeeded`, with the turn so far in the journal; a later attempt given the decision
continues from it. A refused call is answered to the model with the refusal, as an error
result it can act on.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from interlock.providers.base import (
    CallStopped,
    ModelRequest,
    ModelResult,
    ProviderError,
    ToolResult,
    ToolTurn,
)
from interlock.providers.mcp_tools import Toolbox
from interlock.providers.usage import MAX_STEPS

Complete = Callable[[ModelRequest], Awaitable[ModelResult]]
Record = Callable[[dict[str, Any]], None]


ARGUMENTS_SHOWN = 4000  # characters of a waiting call's arguments kept in the ledger


class ApprovalNeeded(ProviderError):
    """The loop reached a call that waits for a person's decision; `approval` says which
    (turn and call from 1, tool, arguments) and `answered` what the loop spent so far."""

    def __init__(self, message: str, *, approval: dict[str, Any], answered: ModelResult | None):
        super().__init__(message, retryable=True, answered=answered)
        self.approval = approval


def refusal(tool: str, note: str) -> str:
    """What the model is told of a call a person refused."""
    said = f": {note}" if note else ""
    return (
        f"A person refused this call of {tool!r}{said}. It was not run; go on without it "
        "or ask for something else."
    )


class Journal(Protocol):
    """Where a loop's completed steps are kept for a later attempt."""

    def answer(self, turn: int, answer: ToolTurn) -> None:
        """The model's answer of `turn` with the calls it asks for (no results yet)."""

    def result(self, turn: int, index: int, result: ToolResult) -> None:
        """What call `index` (from 0) of `turn` gave back."""


def idempotency_key(request: ModelRequest, turn: int, index: int) -> str:
    """The key of call `index` (from 0) of `turn`: the same in every attempt of the task,
    so a server can tell a call repeated after a crash from a new one."""
    return f"{request.run_id}/{request.task_id}/{turn}/{index + 1}"


def summed(results: Sequence[ModelResult], before: Sequence[dict[str, Any]] = ()) -> ModelResult:
    """The calls of a loop as one result: tokens, cost and time added up, the text, finish
    reason and tool calls of the last call, and `steps`: each model call and tool call this
    attempt made, with its times (what a trace shows of the loop); `before`: the tool calls
    it made before its first model call (those of a turn an earlier attempt answered)."""
    steps: list[dict[str, Any]] = list(before)
    for result in results:
        started = result.extra.get("started_at")
        if started is not None:
            steps.append(
                {
                    "kind": "chat",
                    "at": float(started),
                    "s": round(result.latency_s, 4),
                    "model": result.model,
                    "input_tokens": result.input_tokens,
                    "output_tokens": result.output_tokens,
                    "finish_reason": result.finish_reason,
                    "cost_usd": result.cost_usd,
                }
            )
        steps.extend(json.loads(result.extra.get("tool_steps", "[]")))
    own = ("started_at", "tool_steps", "steps")
    return replace(
        results[-1],
        input_tokens=sum(r.input_tokens for r in results),
        output_tokens=sum(r.output_tokens for r in results),
        cache_read_tokens=sum(r.cache_read_tokens for r in results),
        cache_write_tokens=sum(r.cache_write_tokens for r in results),
        reasoning_tokens=sum(r.reasoning_tokens for r in results),
        cost_usd=sum(r.cost_usd for r in results),
        latency_s=sum(r.latency_s for r in results),
        extra={
            **{k: v for r in results for k, v in r.extra.items() if k not in own},
            "turns": str(len(results)),
            "tool_calls": str(sum(len(r.tool_calls) for r in results)),
            **({"steps": json.dumps(steps[:MAX_STEPS])} if steps else {}),
        },
    )


def _with_tool_step(
    results: list[ModelResult], step: dict[str, Any], before: list[dict[str, Any]]
) -> None:
    """Keep a tool call's step with the model call that asked for it (the last of
    `results`), or in `before` when an earlier attempt made that call."""
    if not results:
        before.append(step)
        return
    last = results[-1]
    steps = [*json.loads(last.extra.get("tool_steps", "[]")), step]
    results[-1] = replace(last, extra={**last.extra, "tool_steps": json.dumps(steps)})


async def run_tool_loop(
    complete: Complete,
    request: ModelRequest,
    toolbox: Toolbox,
    *,
    max_turns: int,
    accept_max_turns: bool,
    record: Record,
    journal: Journal | None = None,
    done: Sequence[ToolTurn] = (),
    partial: ToolTurn | None = None,
    decisions: Mapping[str, Mapping[str, Any]] | None = None,
) -> ModelResult:
    """Run the loop to the model's answer.

    Args:
        complete: One model call (with its structured-output fallback, if any).
        request: The first call; the loop adds the tools and the turns so far.
        toolbox: The open tool servers.
        max_turns: Model calls allowed in all.
        accept_max_turns: Keep the last answer when the model still asks for tools at
            `max_turns`, instead of failing the attempt.
        record: Called with each transcript entry.
        journal: Told each answer and result as it completes.
        done: The turns an earlier attempt completed: the loop goes on after them.
        partial: The turn after `done` if an earlier attempt recorded its answer and only
            some of its results: its other calls are made, its model call is not.
        decisions: The calls a person decided, by ``"<turn>/<call>"`` (call from 1):
            ``{tool, approved, note}``.

    Raises:
        ApprovalNeeded: A call of an `approve` tool waits for a person's decision.
        ProviderError: A call or a tool server failed, or `max_turns` was reached; it carries
            the loop's spend so far.
        CallStopped: The attempt was cancelled; it carries the loop's spend so far.
    """
    spent: list[ModelResult] = []
    early: list[dict[str, Any]] = []  # tool calls made before this attempt's first model call
    # An earlier attempt's turns, at most as many as leave one model call to make.
    turns: list[ToolTurn] = list(done[: max_turns - 1])
    if len(turns) < len(done) or len(turns) + 1 >= max_turns:
        partial = None
    for turn in range(len(turns) + 1, max_turns + 1):
        if partial is not None and turn == len(done) + 1:
            answer, results = partial, list(partial.results)
        else:
            result = await _answer(complete, replace(request, turns=tuple(turns)), toolbox, spent)
            spent.append(result)
            record(
                {
                    "turn": turn,
                    "text": result.text,
                    "finish_reason": result.finish_reason,
                    "calls": [
                        {"id": c.id, "name": c.name, "arguments": c.arguments}
                        for c in result.tool_calls
                    ],
                }
            )
            if not result.tool_calls:
                return summed(spent, early)
            if turn == max_turns:
                break
            answer = ToolTurn(
                text=result.text, calls=result.tool_calls, results=(), thinking=result.thinking
            )
            results = []
            if journal is not None:
                journal.answer(turn, answer)
        for index, call in enumerate(answer.calls[len(results) :], start=len(results)):
            decided = (decisions or {}).get(f"{turn}/{index + 1}")
            if decided is not None and decided.get("tool") != call.name:
                decided = None  # decided for another conversation's call (the prompt changed)
            if toolbox.asks(call) and decided is None:
                record({"turn": turn, "call": call.id, "name": call.name, "awaiting": True})
                raise ApprovalNeeded(
                    f"tool call {call.name!r} (turn {turn}, call {index + 1}) waits for a "
                    "person's approval",
                    approval={
                        "turn": turn,
                        "call": index + 1,
                        "tool": call.name,
                        "arguments": call.arguments[:ARGUMENTS_SHOWN],
                    },
                    answered=summed(spent, early) if spent else None,
                )
            began = time.time()
            step: dict[str, Any] = {
                "kind": "tool",
                "at": began,
                "name": call.name,
                "call_id": call.id,
                "turn": turn,
                "call": index + 1,
            }
            try:
                if decided is not None and not decided.get("approved"):
                    outcome = ToolResult(
                        call_id=call.id,
                        content=refusal(call.name, str(decided.get("note") or "")),
                        is_error=True,
                    )
                    step["refused"] = True
                else:
                    outcome = await toolbox.call(call, key=idempotency_key(request, turn, index))
            except asyncio.CancelledError:
                if spent:
                    raise CallStopped(summed(spent)) from None
                raise
            except ProviderError as failure:
                record({"turn": turn, "call": call.id, "fault": str(failure)})
                failed = {**step, "s": time.time() - began, "error": str(failure)}
                _with_tool_step(spent, failed, early)
                raise _with_spend(failure, spent, early) from None
            _with_tool_step(
                spent,
                {**step, "s": round(time.time() - began, 4), "error": outcome.is_error},
                early,
            )
            record(
                {
                    "turn": turn,
                    "call": call.id,
                    "name": call.name,
                    "result": outcome.content,
                    "is_error": outcome.is_error,
                }
            )
            if journal is not None:
                journal.result(turn, index, outcome)
            results.append(outcome)
        turns.append(replace(answer, results=tuple(results)))
    last = summed(spent, early)
    if accept_max_turns:
        return replace(last, tool_calls=())
    raise ProviderError(
        f"{last.provider}: model {last.model!r} still asked for tools after max_turns "
        f"({max_turns}) model calls; the answer was discarded. Raise max_turns, or set "
        "accept_max_turns: true on the worker to keep the last answer",
        retryable=True,
        answered=last,
    )


async def _answer(
    complete: Complete, request: ModelRequest, toolbox: Toolbox, spent: list[ModelResult]
) -> ModelResult:
    """One model call of the loop (`started_at` in its extra), its failure carrying the
    loop's spend so far."""
    began = time.time()
    try:
        result = await complete(replace(request, tools=toolbox.specs))
        return replace(result, extra={**result.extra, "started_at": repr(began)})
    except CallStopped as stopped:
        raise CallStopped(summed([*spent, stopped.answered])) from stopped
    except asyncio.CancelledError:
        if spent:
            raise CallStopped(summed(spent)) from None
        raise
    except ProviderError as failure:
        answered = [*spent, *([failure.answered] if failure.answered else [])]
        raise _with_spend(failure, answered) from None


def _with_spend(
    failure: ProviderError, spent: list[ModelResult], before: Sequence[dict[str, Any]] = ()
) -> ProviderError:
    """`failure` carrying what the loop's calls cost so far."""
    answered = summed(spent, before) if spent else None
    return ProviderError(
        str(failure),
        retryable=failure.retryable,
        status=failure.status,
        retry_after=failure.retry_after,
        answered=answered,
    )
