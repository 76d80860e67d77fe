"""Tool calls that wait for a person (`approve:` of a worker's MCP server entry).

A model worker's tool loop stops at a call of an `approve` tool; its attempt ends with a
`TaskFailed` carrying `approval` (no failure) and the run pauses (`core.decide`). A person
answers with `interlock approve --call TASK/TURN/CALL` or `reject --call ...`: a command
whose message is a `CallDecision`, recorded by the run's driver as `ToolCallDecided`. Pure:
no I/O.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from interlock.core import events as ev
from interlock.core.state import RunState

ARGUMENTS_LISTED = 200  # characters of a waiting call's arguments shown by status and explain


@dataclass(frozen=True, kw_only=True)
class CallDecision:
    """What `interlock approve --call` / `reject --call` asks: call `call`
    (``TASK/TURN/CALL``) runs (`approved`), or the model is told `note` instead."""

    call: str
    approved: bool
    note: str = ""

    def to_message(self) -> str:
        """The command's message text."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_message(cls, text: str) -> CallDecision | None:
        """The decision a command's message holds (None: not one)."""
        try:
            data = json.loads(text)
            return cls(**data) if isinstance(data, dict) else None
        except (ValueError, TypeError):
            return None


def call_ref(task_id: str, turn: int, call: int) -> str:
    """How a person names a waiting call: ``TASK/TURN/CALL`` (turn and call from 1)."""
    return f"{task_id}/{turn}/{call}"


def waiting_calls(state: RunState) -> list[dict[str, Any]]:
    """The tool calls that wait for a decision, in dispatch order: ref, task, turn, call,
    tool, arguments (the start of them) and since when."""
    shown = []
    for task in state.in_group(state.awaiting):
        waiting = state.tool_waits.get(task.task_id)
        if waiting is None:
            continue  # decided: its next attempt is about to be dispatched
        arguments = str(waiting.get("arguments", ""))
        if len(arguments) > ARGUMENTS_LISTED:
            arguments = arguments[:ARGUMENTS_LISTED] + "..."
        turn, call = int(waiting.get("turn", 0)), int(waiting.get("call", 0))
        shown.append(
            {
                "ref": call_ref(task.task_id, turn, call),
                "task": task.task_id,
                "turn": turn,
                "call": call,
                "tool": str(waiting.get("tool", "")),
                "arguments": arguments,
                "since": waiting.get("since"),
            }
        )
    return shown


def call_refusal(state: RunState, ref: str) -> str | None:
    """Why call `ref` cannot be decided now (None: it waits for a decision)."""
    run = state.run_id
    waiting = waiting_calls(state)
    listed = ", ".join(c["ref"] for c in waiting) or "none"
    if state.status.ended:
        return f"run {run} is {state.status.value}: tool call {ref} no longer waits for a decision"
    task_id, _, rest = ref.rpartition("/")
    task_id, _, turn = task_id.rpartition("/")
    if not task_id or not turn.isdigit() or not rest.isdigit():
        return (
            f"{ref!r} names no tool call: give it as TASK/TURN/CALL, as 'interlock status "
            f"{run}' lists it (calls waiting now: {listed})"
        )
    decided = state.tasks.get(task_id)
    if decided is not None and f"{int(turn)}/{int(rest)}" in decided.tool_decisions:
        return (
            f"run {run}: tool call {ref} was decided already; it no longer waits (calls "
            f"waiting now: {listed})"
        )
    if not any(c["ref"] == ref for c in waiting):
        return (
            f"run {run}: tool call {ref} does not wait for a decision (calls waiting now: {listed})"
        )
    return None


def interpret_call(state: RunState, message: str, by: str, now: float) -> ev.Event | str:
    """The `ToolCallDecided` a command asks for, or why it is refused."""
    decision = CallDecision.from_message(message)
    if decision is None:
        return f"run {state.run_id}: a tool call decision without a call ({message[:80]!r})"
    refused = call_refusal(state, decision.call)
    if refused is not None:
        return refused
    task_id, turn, call = decision.call.rsplit("/", 2)
    waiting = state.tool_waits[task_id]
    return ev.ToolCallDecided(
        at=now,
        task_id=task_id,
        turn=int(turn),
        call=int(call),
        tool=str(waiting.get("tool", "")),
        approved=decision.approved,
        note=decision.note,
        by=by,
    )
