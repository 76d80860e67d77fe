"""What a stream client receives for one recorded event: the event, where the run stands,
how far along it is, and one human sentence about it."""

from __future__ import annotations

from typing import Any

from interlock.core.state import RunState, RunStatus, listed_status
from interlock.core.workflow import Pipeline
from interlock.runtime.projection import iso, waiting_view
from interlock.storage.base import StoredEvent


def is_final(state: RunState) -> bool:
    """True once nothing more will be recorded for the run (the orchestrator lets go of it)."""
    return state.status.ended and (state.archived or state.status is not RunStatus.DELIVERED)


def progress(pipeline: Pipeline | None, state: RunState) -> float:
    """A fraction in [0, 1]: phases completed, plus the share of tasks done in the current one.

    Loops can revisit phases, so this is an estimate that never reaches 1 before delivery.
    """
    if state.status is RunStatus.DELIVERED:
        return 1.0
    if pipeline is None or not pipeline.phases:
        return 0.0
    total = len(pipeline.phases)
    done: float = sum(1 for p in pipeline.phases if state.phase_status.get(p.id) == "completed")
    current = state.current
    if current is not None and not current.completed and current.task_ids:
        finished = current.done  # kept by the fold: no walk over a wide phase's tasks
        # Out of every task the visit will have, not those dispatched so far: a sequential
        # phase dispatches one at a time, and 1 of 1 done must not become 1 of 2.
        phase = next((p for p in pipeline.phases if p.id == current.phase), None)
        expected = len(phase.workers) * len(current.items or [None]) if phase else 0
        done += finished / max(expected, len(current.task_ids))
    return round(min(0.99, done / total), 4)


def describe(stored: StoredEvent) -> str:
    """One sentence a person reads in a log or a notification."""
    d = stored.data
    task = d.get("task_id", "")
    attempt = f" (attempt {d['attempt']})" if d.get("attempt", 1) > 1 else ""
    texts: dict[str, str] = {
        "run_created": f"run of {d.get('pipeline')} created: {d.get('topic', '')}",
        "phase_started": f"phase {d.get('phase')} started (visit {d.get('visit')})",
        "task_dispatched": f"{task} dispatched{attempt}",
        "task_started": f"{task} started{attempt}",
        "task_completed": f"{task} completed: {d.get('artifact')} ({d.get('size', 0)} bytes)",
        "task_failed": f"{task} stopped at tool call {(d.get('approval') or {}).get('tool')}, "
        "which waits for approval"
        if d.get("approval")
        else f"{task} failed{attempt}: {d.get('error', '')}",
        "task_timed_out": f"{task} timed out{attempt}",
        "usage_recorded": f"{task}: a call answered after it stopped counting cost "
        f"${(d.get('usage') or {}).get('cost_usd', 0):.4f}",
        "task_batch_waited": f"{task}: its model call "
        + ("waits in a provider batch" if d.get("waiting") else "is back from its provider batch"),
        "retry_scheduled": f"{task} will be retried (attempt {d.get('attempt')})",
        "item_failed": f"item {d.get('item')} of {d.get('phase')} failed for good ({task}), "
        f"within its tolerance: {d.get('error', '')}",
        "phase_completed": f"phase {d.get('phase')} completed",
        "branch_taken": f"after {d.get('phase')}, going to {d.get('goto')}",
        "warned": f"warning: {d.get('message', '')}",
        "paused": "paused: a tool call waits for approval"
        if d.get("reason") == "tool"
        else f"paused after {d.get('phase')}: waiting for approval",
        "tool_call_decided": f"tool call {task}/{d.get('turn')}/{d.get('call')} "
        f"({d.get('tool')}) {'approved' if d.get('approved') else 'refused'} by "
        f"{d.get('by') or 'someone'}" + (f": {d['note']}" if d.get("note") else ""),
        "approved": f"approved by {d.get('by') or 'someone'}"
        + (f": {d['message']}" if d.get("message") else ""),
        "rejected": f"sent back to {d.get('to')} by {d.get('by') or 'someone'}"
        + (f": {d['feedback']}" if d.get("feedback") else ""),
        "output_edited": f"{d.get('artifact')} edited by {d.get('by') or 'someone'}"
        + (f": {d['note']}" if d.get("note") else ""),
        "wait_started": _wait_sentence(d),
        "signal_received": f"signal {d.get('name')} received from {d.get('by') or 'someone'}"
        + (f" (key {d['key']})" if d.get("key") else ""),
        "wait_ended": f"{d.get('phase')}: "
        + {"signal": f"signal {d.get('signal')} arrived", "due": "the wait is over"}.get(
            str(d.get("outcome")), f"signal {d.get('signal')} did not arrive in time"
        ),
        "message_noted": f"note from {d.get('by') or 'someone'}: {d.get('message', '')}",
        "run_cancelled": f"cancelled by {d.get('by') or 'someone'}"
        + (f": {d['reason']}" if d.get("reason") not in (None, "", "cancelled") else ""),
        "run_failed": f"failed: {d.get('reason', '')}",
        "delivered": f"delivered {d.get('artifact')}",
        "archived": "archived",
    }
    return texts.get(stored.kind, stored.kind)


def _wait_sentence(d: dict[str, Any]) -> str:
    """`review waits for signal go until 2026-...Z`, `publish waits until ...`."""
    until = f" until {iso(d['until'])}" if d.get("until") is not None else ""
    what = f" for signal {d['signal']}" if d.get("signal") else ""
    return f"{d.get('phase')} waits{what}{until}"


def event_message(
    stored: StoredEvent, state: RunState, pipeline: Pipeline | None
) -> dict[str, Any]:
    """The stream message for `stored`; `state` is the run's state right after it."""
    return {
        "type": "event",
        "id": stored.id,
        "run_id": stored.run_id,
        "seq": stored.seq,
        "at": stored.at,
        "kind": stored.kind,
        "data": stored.data,
        "rule": stored.rule,
        "why": stored.why,
        # As the runs list says it: `waiting` (not `running`) while a wait, a concurrency
        # slot or a waiting child run holds it, with what it waits for.
        "state": listed_status(state),
        "waiting": waiting_view(state),
        "phase": state.current.phase if state.current else None,
        "progress": progress(pipeline, state),
        "cost_usd": round(state.cost_usd, 6),
        "estimated": state.estimated,  # some call's tokens, so the cost, were estimated
        "message": describe(stored),
        "final": is_final(state),
    }


def event_record(stored: StoredEvent) -> dict[str, Any]:
    """An event as the REST API lists it."""
    return {
        "id": stored.id,
        "seq": stored.seq,
        "at": stored.at,
        "kind": stored.kind,
        "data": stored.data,
        "rule": stored.rule,
        "why": stored.why,
        "message": describe(stored),
    }


# What a list of runs shows of one: its state after the message's event, not the event itself.
SUMMARY_KEYS = (
    *("run_id", "id", "seq", "at", "kind"),
    *("state", "waiting", "phase", "progress", "cost_usd", "estimated", "final"),
)


def run_summary(message: dict[str, Any]) -> dict[str, Any]:
    """The summary of a run that `message` (an event's stream message) leaves it in."""
    return {key: message[key] for key in SUMMARY_KEYS}
