"""Turning observations into events: worker results and people's commands.

Both are filtered here, purely, against the run's state. A result for an attempt that is no
longer current, or for a task that already finished, is dropped; an approval for a run that is
not paused is refused. This is what makes feeding the same observation twice harmless.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from interlock.core import events as ev
from interlock.core.state import RunState, RunStatus
from interlock.core.tool_calls import interpret_call

TaskResult = ev.TaskStarted | ev.TaskCompleted | ev.TaskFailed | ev.TaskTimedOut


def accept_result(state: RunState, result: TaskResult) -> bool:
    """Whether a worker's report should be recorded (False: stale, duplicate or unknown)."""
    task = state.tasks.get(result.task_id)
    if task is None or task.attempt != result.attempt or not task.status.in_flight:
        return False
    if isinstance(result, ev.TaskStarted):
        # A second start of the attempt is recorded when another process reports it later:
        # the one that ran it stopped (its orchestrator died) and the attempt runs again, so
        # the history shows every run that really happened.
        return task.started_at is None or (
            result.worker != task.worker and result.at > task.started_at
        )
    return True


def accept_child_update(state: RunState, update: ev.ChildUpdated) -> bool:
    """Whether a child run's new status should be recorded on its parent (False: the attempt
    is no longer current, or the status is the one recorded already)."""
    task = state.tasks.get(update.task_id)
    if task is None or task.attempt != update.attempt or not task.status.in_flight:
        return False
    known = state.children.get(update.task_id)
    return known is None or (known.attempt, known.status, known.detail) != (
        update.attempt,
        update.status,
        update.detail,
    )


def accept_child_spend(state: RunState, spent: ev.ChildSpent) -> bool:
    """Whether a running child's spend so far should be recorded on its parent (False: the
    attempt is no longer current or its final usage is recorded, or nothing changed)."""
    task = state.tasks.get(spent.task_id)
    if task is None or task.attempt != spent.attempt or not task.status.in_flight:
        return False
    if spent.attempt in task.charged:
        return False
    return task.child_spend.get(spent.attempt, (0.0, 0)) != (spent.cost_usd, spent.tokens)


def accept_batch_wait(state: RunState, wait: ev.TaskBatchWaited) -> bool:
    """Whether a call's going into a provider batch, or coming back, should be recorded
    (False: the attempt is no longer current or not started, or nothing changed)."""
    task = state.tasks.get(wait.task_id)
    if task is None or task.attempt != wait.attempt or task.started_at is None:
        return False
    return task.status.in_flight and (task.batch_since is not None) is not wait.waiting


def implied_start(state: RunState, result: TaskResult) -> ev.TaskStarted | None:
    """The start a worker's completion implies when the ledger holds none for its attempt.

    Dispatchers report a start before the result, but a start and its result can reach an
    orchestrator that dies before recording them, and the result can then arrive again (a
    duplicate delivery) at the next one: recording the start with it keeps every completion
    after its start. Outputs adopted from disk are recorded as such instead.
    """
    if not isinstance(result, ev.TaskCompleted) or result.adopted:
        return None
    task = state.tasks.get(result.task_id)
    if task is None or task.started_at is not None:
        return None
    return ev.TaskStarted(at=result.at, task_id=result.task_id, attempt=result.attempt)


def late_usage(state: RunState, result: TaskResult) -> ev.UsageRecorded | None:
    """The cost to record from a result that `accept_result` dropped, if it carries one.

    A call the server answered was paid for even when its result no longer counts: a
    sibling's failure ended the run while it was being answered, or the engine had already
    timed the attempt out. Each attempt's cost is recorded once, so a duplicate delivery of
    a result whose cost is recorded adds nothing.
    """
    if not isinstance(result, ev.TaskCompleted | ev.TaskFailed) or not result.usage:
        return None
    usage = result.usage
    if not any(usage.get(k) for k in ("cost_usd", "input_tokens", "output_tokens")):
        return None
    task = state.tasks.get(result.task_id)
    if task is None or result.attempt > task.attempt or result.attempt in task.charged:
        return None
    return ev.UsageRecorded(
        at=result.at, task_id=result.task_id, attempt=result.attempt, usage=dict(usage)
    )


class CommandKind(StrEnum):
    """What a person can ask of a run."""

    APPROVE = "approve"  # continue a paused run
    CANCEL = "cancel"  # stop the run and its tasks
    MESSAGE = "message"  # note something in the run's history
    REJECT = "reject"  # send a paused run back to a phase, with feedback (`core.review`)
    EDIT = "edit"  # replace an output of a paused run (`core.review`)
    SIGNAL = "signal"  # a signal from outside the run (`core.waits`), a `SignalMessage`
    DECIDE_CALL = "decide_call"  # let a waiting tool call run, or refuse it (`core.tool_calls`)


@dataclass(frozen=True, kw_only=True)
class Command:
    """A person's command, as posted to the run's inbox."""

    kind: CommandKind
    message: str = ""
    by: str = ""


@dataclass(frozen=True, kw_only=True)
class SignalMessage:
    """What a signal command carries in its message (JSON)."""

    name: str
    data: Any = None
    key: str | None = None
    sent_at: float | None = None

    def to_message(self) -> str:
        """The command's message text."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_message(cls, text: str) -> SignalMessage | None:
        """The signal a command's message holds (None: not one)."""
        try:
            data = json.loads(text)
            return cls(**data) if isinstance(data, dict) else None
        except (ValueError, TypeError):
            return None


SIGNAL_STATES = ("running", "waiting", "paused")  # a run accepts signals in these states


def signal_refusal(state: RunState, name: str, key: str | None) -> str | None:
    """Why a signal cannot be recorded for the run now (None: it can)."""
    if state.status.ended:
        return (
            f"run {state.run_id} is {state.status.value}: a signal can be sent to a run that is "
            f"{', '.join(SIGNAL_STATES[:-1])} or {SIGNAL_STATES[-1]}"
        )
    if key is not None and key in state.signal_keys:
        return f"run {state.run_id} already received a signal with key {key!r}: ignored"
    return None


def interpret_command(state: RunState, command: Command, now: float) -> ev.Event | str:
    """The event a command leads to, or why it is refused (a message for the person)."""
    run = state.run_id
    if command.kind is CommandKind.SIGNAL:
        signal = SignalMessage.from_message(command.message)
        if signal is None:
            return f"run {run}: a signal command without a signal ({command.message[:80]!r})"
        refused = signal_refusal(state, signal.name, signal.key)
        if refused is not None:
            return refused
        return ev.SignalReceived(
            at=now,
            name=signal.name,
            data=signal.data,
            key=signal.key,
            by=command.by,
            sent_at=signal.sent_at,
        )
    if command.kind is CommandKind.DECIDE_CALL:
        return interpret_call(state, command.message, command.by, now)
    if command.kind is CommandKind.APPROVE:
        if state.status is not RunStatus.PAUSED:
            return f"run {run} is not paused (it is {state.status.value}); nothing to approve"
        child = state.held_by_child("paused") if state.pause_reason == "child" else None
        if child is not None:
            return f"run {run} is paused by its child run {child.run}: approve that run"
        if state.pause_reason == "tool":
            return (
                f"run {run} is paused for a tool call: decide it with 'interlock approve "
                f"{run} --call TASK/TURN/CALL' (or 'reject --call')"
            )
        return ev.Approved(at=now, message=command.message, by=command.by)
    if command.kind is CommandKind.CANCEL:
        if state.status.ended:
            return f"run {run} already ended ({state.status.value}); nothing to cancel"
        return ev.RunCancelled(at=now, reason=command.message or "cancelled", by=command.by)
    return ev.MessageNoted(at=now, message=command.message, by=command.by)
