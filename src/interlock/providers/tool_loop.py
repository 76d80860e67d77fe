"""A model worker's tool loop: call the model, run the tools it asks for, call it again.

Bounded by `max_turns` model calls within one attempt. The loop's tokens and cost are those
of every call summed, recorded as one call's usage is; what each turn said and every tool call
and result are handed to `record` as they happen, so the attempt's transcript is complete
also when the loop fails part-way. The output is still only the model's last answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from interlock.providers.base import (
    CallStopped,
    ModelRequest,
    ModelResult,
    ProviderError,
    ToolTurn,
)
from interlock.providers.mcp_tools import Toolbox

Complete = Callable[[ModelRequest], Awaitable[ModelResult]]
Record = Callable[[dict[str, Any]], None]


def summed(results: Sequence[ModelResult]) -> ModelResult:
    """The calls of a loop as one result: tokens, cost and time added up, the text, finish
    reason and tool calls of the last call."""
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
            **{k: v for r in results for k, v in r.extra.items()},
            "turns": str(len(results)),
            "tool_calls": str(sum(len(r.tool_calls) for r in results)),
        },
    )


async def run_tool_loop(
    complete: Complete,
    request: ModelRequest,
    toolbox: Toolbox,
    *,
    max_turns: int,
    accept_max_turns: bool,
    record: Record,
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

    Raises:
        ProviderError: A call or a tool server failed, or `max_turns` was reached; it carries
            the loop's spend so far.
        CallStopped: The attempt was cancelled; it carries the loop's spend so far.
    """
    spent: list[ModelResult] = []
    turns: list[ToolTurn] = []
    for turn in range(1, max_turns + 1):
        try:
            result = await complete(replace(request, tools=toolbox.specs, turns=tuple(turns)))
        except CallStopped as stopped:
            raise CallStopped(summed([*spent, stopped.answered])) from stopped
        except asyncio.CancelledError:
            if spent:
                raise CallStopped(summed(spent)) from None
            raise
        except ProviderError as failure:
            answered = [*spent, *([failure.answered] if failure.answered else [])]
            raise _with_spend(failure, answered) from None
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
            return summed(spent)
        if turn == max_turns:
            break
        results = []
        for call in result.tool_calls:
            try:
                outcome = await toolbox.call(call)
            except asyncio.CancelledError:
                raise CallStopped(summed(spent)) from None
            except ProviderError as failure:
                record({"turn": turn, "call": call.id, "fault": str(failure)})
                raise _with_spend(failure, spent) from None
            record(
                {
                    "turn": turn,
                    "call": call.id,
                    "name": call.name,
                    "result": outcome.content,
                    "is_error": outcome.is_error,
                }
            )
            results.append(outcome)
        turns.append(
            ToolTurn(
                text=result.text,
                calls=result.tool_calls,
                results=tuple(results),
                thinking=result.thinking,
            )
        )
    last = summed(spent)
    if accept_max_turns:
        return replace(last, tool_calls=())
    raise ProviderError(
        f"{last.provider}: model {last.model!r} still asked for tools after max_turns "
        f"({max_turns}) model calls; the answer was discarded. Raise max_turns, or set "
        "accept_max_turns: true on the worker to keep the last answer",
        retryable=True,
        answered=last,
    )


def _with_spend(failure: ProviderError, spent: list[ModelResult]) -> ProviderError:
    """`failure` carrying what the loop's calls cost so far."""
    answered = summed(spent) if spent else None
    return ProviderError(
        str(failure),
        retryable=failure.retryable,
        status=failure.status,
        retry_after=failure.retry_after,
        answered=answered,
    )
