"""Every attempt of every task of a run, and where the time and money went, from its history.

The run's state keeps only each task's latest attempt; the dashboard's timeline and attempt
detail need all of them: when each was queued, started and finished, how it ended, what it
cost. All of it is in the ledger, so this is one more projection of the events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from interlock.core import events as ev
from interlock.core.workflow import Pipeline
from interlock.runtime.projection import iso
from interlock.storage.base import StoredEvent

TOKEN_KINDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


@dataclass(slots=True)
class Attempt:
    """One dispatch of a task and what became of it."""

    seq: int  # the dispatch event's seq: the attempt's id within the run
    task_id: str
    phase: str
    role: str
    visit: int
    item: int | None
    attempt: int
    model: str | None
    queued_at: float
    started_at: float | None = None
    finished_at: float | None = None
    outcome: str = "queued"
    worker: str = ""
    error: str | None = None
    artifact: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    usage: list[dict[str, Any]] = field(default_factory=list)
    reused_from: dict[str, str] | None = None
    edits: list[dict[str, Any]] = field(default_factory=list)
    retry_at: float | None = None
    # A pipeline task's child run: what it has spent so far (cost, tokens), until the
    # attempt's final usage replaces it (as the parent's budget counts it, `ChildSpent`).
    child_spent: tuple[float, int] | None = None

    def cost(self) -> float:
        """What the attempt's calls cost (a call answered after the attempt stopped counts),
        or, while its child run runs, what the child has spent so far."""
        if not self.usage and self.child_spent is not None:
            return self.child_spent[0]
        return sum(float(u.get("cost_usd") or 0.0) for u in self.usage)

    def child_tokens(self) -> int:
        """Tokens its running child has spent so far (recorded as one total, not by kind)."""
        return self.child_spent[1] if not self.usage and self.child_spent is not None else 0

    def tokens(self) -> dict[str, int]:
        """Tokens by kind over the attempt's calls."""
        return {k: sum(int(u.get(k) or 0) for u in self.usage) for k in TOKEN_KINDS}

    def as_dict(self) -> dict[str, Any]:
        """The attempt as the API lists it."""
        last = self.usage[-1] if self.usage else {}
        end = self.finished_at
        return {
            "seq": self.seq,
            "task_id": self.task_id,
            "phase": self.phase,
            "role": self.role,
            "visit": self.visit,
            "item": self.item,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "queued_at": iso(self.queued_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(end),
            "queued_s": _span(self.queued_at, self.started_at or end),
            "duration_s": _span(self.started_at, end),
            "worker": self.worker,
            "model": last.get("model") or self.model,
            "alias": last.get("alias") or self.model,
            "provider": last.get("provider"),
            "finish_reason": last.get("finish_reason"),
            "latency_s": round(sum(float(u.get("latency_s") or 0.0) for u in self.usage), 4)
            if self.usage
            else None,
            "estimated": any(u.get("estimated") for u in self.usage),
            # A tool loop's model calls and the tools it called (its transcript is in the
            # attempt's detail).
            "turns": sum(int(u.get("turns") or 0) for u in self.usage) or None,
            "tool_calls": sum(int(u.get("tool_calls") or 0) for u in self.usage) or None,
            "cost_usd": round(self.cost(), 6),
            "tokens": self.tokens(),
            "child_tokens": self.child_tokens(),
            "error": self.error,
            "output": self.artifact,
            "values": self.values,
            "reused_from": self.reused_from,
            "edits": self.edits,
            "retry_at": iso(self.retry_at),
            "child_spent": {"cost_usd": self.child_spent[0], "tokens": self.child_spent[1]}
            if self.child_spent is not None and not self.usage
            else None,
        }


def _span(start: float | None, end: float | None) -> float | None:
    return round(end - start, 3) if start is not None and end is not None else None


@dataclass(slots=True)
class Timeline:
    """A run's attempts in dispatch order, and the spans it spent paused or waiting (for a
    signal or a delay)."""

    attempts: list[Attempt] = field(default_factory=list)
    pauses: list[dict[str, Any]] = field(default_factory=list)
    start: float | None = None
    end: float | None = None


def timeline(events: list[StoredEvent]) -> Timeline:
    """Fold a run's history into its attempts and pauses."""
    folder = TimelineFold()
    folder.feed(events)
    return folder.timeline()


class TimelineFold:
    """The attempts and pauses of a run, folded one event at a time, so that a reader that
    kept it folds only the events recorded since (`interlock.server.reads`)."""

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []
        self.pauses: list[dict[str, Any]] = []  # times as epoch seconds until `timeline`
        self.start: float | None = None
        self.end: float | None = None
        self._latest: dict[str, Attempt] = {}  # task id -> its current attempt
        self._numbered: dict[tuple[str, int], Attempt] = {}  # (task id, attempt number)
        self._paused: dict[str, Any] | None = None
        self._waiting: dict[str, Any] | None = None

    def timeline(self) -> Timeline:
        """What is folded so far, with the pauses' times as ISO text (copies: feeding more
        does not change them)."""
        pauses = [
            {**pause, "start": iso(pause["start"]), "end": iso(pause["end"])}
            for pause in self.pauses
        ]
        return Timeline(attempts=self.attempts, pauses=pauses, start=self.start, end=self.end)

    def feed(self, events: list[StoredEvent]) -> None:
        """Fold `events` (the next ones of the run's history, in order)."""
        for stored in events:
            self._one(stored)

    def _one(self, stored: StoredEvent) -> None:
        event = stored.event
        at = event.at
        self.start = at if self.start is None else self.start
        self.end = at
        if isinstance(event, ev.TaskDispatched):
            attempt = Attempt(
                seq=stored.seq,
                task_id=event.task_id,
                phase=event.phase,
                role=event.role,
                visit=event.visit,
                item=event.item,
                attempt=event.attempt,
                model=event.model,
                queued_at=at,
            )
            self.attempts.append(attempt)
            self._latest[event.task_id] = attempt
            self._numbered[event.task_id, event.attempt] = attempt
        elif isinstance(event, ev.ChildSpent):
            # An earlier attempt's child may still be spending after a retry began.
            spender = self._numbered.get((event.task_id, event.attempt))
            if spender is not None:
                spender.child_spent = (event.cost_usd, event.tokens)
        elif isinstance(event, ev.WaitStarted):
            reason = f"signal {event.signal}" if event.signal else "delay"
            waiting = {"phase": event.phase, "reason": reason, "start": at, "end": None}
            waiting["kind"] = "wait"
            self._waiting = waiting
            self.pauses.append(waiting)
        elif isinstance(event, ev.WaitEnded) and self._waiting is not None:
            self._waiting["end"], self._waiting["how"] = at, event.outcome
            self._waiting = None
        elif isinstance(event, ev.Paused):
            paused = {"phase": event.phase, "reason": event.reason, "start": at, "end": None}
            paused["kind"] = "pause"
            self._paused = paused
            self.pauses.append(paused)
        elif isinstance(event, (ev.Approved, ev.Rejected, ev.RunCancelled, ev.RunFailed)):
            if self._paused is not None:
                self._paused["end"] = at
                self._paused["by"] = getattr(event, "by", "")
                self._paused["how"] = event.kind
                self._paused = None
            if isinstance(event, (ev.RunCancelled, ev.RunFailed)):
                if self._waiting is not None:
                    self._waiting["end"], self._waiting["how"] = at, event.kind
                    self._waiting = None
                for open_attempt in self._latest.values():
                    if open_attempt.outcome in ("queued", "running", "retry_wait"):
                        open_attempt.outcome = "abandoned"
                        open_attempt.finished_at = open_attempt.finished_at or at
        elif hasattr(event, "task_id") and event.task_id in self._latest:
            _task_event(self._latest[event.task_id], event, at)


def _task_event(attempt: Attempt, event: ev.Event, at: float) -> None:
    """Apply an event about a task to its current attempt."""
    if isinstance(event, ev.TaskStarted):
        attempt.started_at, attempt.worker, attempt.outcome = at, event.worker, "running"
    elif isinstance(event, ev.TaskCompleted):
        attempt.finished_at, attempt.outcome = at, "done"
        attempt.artifact, attempt.values = event.artifact, dict(event.values)
        if event.usage:
            attempt.usage.append(dict(event.usage))
    elif isinstance(event, ev.TaskReused):
        attempt.finished_at, attempt.outcome = at, "reused"
        attempt.artifact, attempt.values = event.artifact, dict(event.values)
        attempt.reused_from = {"run": event.source_run, "task": event.source_task, "via": event.via}
    elif isinstance(event, ev.TaskFailed):
        attempt.finished_at, attempt.outcome, attempt.error = at, "failed", event.error
        if event.usage:
            attempt.usage.append(dict(event.usage))
    elif isinstance(event, ev.TaskTimedOut):
        attempt.finished_at, attempt.outcome = at, "timed_out"
        attempt.error = event.detail or "timed out"
    elif isinstance(event, ev.UsageRecorded):
        attempt.usage.append(dict(event.usage))
    elif isinstance(event, ev.RetryScheduled):
        if attempt.outcome == "failed":
            attempt.outcome = "retried"  # a timed-out attempt keeps saying so
        attempt.retry_at = event.not_before
    elif isinstance(event, ev.OutputEdited):
        attempt.outcome = "edited"
        attempt.values = dict(event.values)
        attempt.edits.append({"by": event.by, "note": event.note, "at": iso(at)})


def costs(pipeline: Pipeline, attempts: list[Attempt]) -> dict[str, Any]:
    """Cost and tokens by kind per task, per phase and for the run, and the budget used."""
    zero = dict.fromkeys(TOKEN_KINDS, 0)

    def bucket() -> dict[str, Any]:
        # `estimated`: some call's tokens (so its cost) were counted at four characters a
        # token, its server having reported none.
        return {
            "cost_usd": 0.0,
            "tokens": dict(zero),
            "child_tokens": 0,
            "attempts": 0,
            "estimated": False,
        }

    tasks: dict[str, dict[str, Any]] = {}
    phases: dict[str, dict[str, Any]] = {p.id: bucket() for p in pipeline.phases}
    run = bucket()
    for a in attempts:
        for target in (
            tasks.setdefault(a.task_id, {**bucket(), "phase": a.phase, "role": a.role}),
            phases.setdefault(a.phase, bucket()),
            run,
        ):
            target["cost_usd"] += a.cost()
            target["attempts"] += 1
            target["estimated"] = target["estimated"] or any(u.get("estimated") for u in a.usage)
            target["child_tokens"] += a.child_tokens()
            for kind, count in a.tokens().items():
                target["tokens"][kind] += count
    for target in (*tasks.values(), *phases.values(), run):
        target["cost_usd"] = round(target["cost_usd"], 6)
    budget = pipeline.budget
    used: dict[str, Any] | None = None
    if budget is not None:
        total_tokens = (
            run["tokens"]["input_tokens"] + run["tokens"]["output_tokens"] + run["child_tokens"]
        )
        used = {
            "max_cost_usd": budget.max_cost_usd,
            "max_tokens": budget.max_tokens,
            "on_exceed": budget.on_exceed,
            "cost_fraction": round(run["cost_usd"] / budget.max_cost_usd, 4)
            if budget.max_cost_usd
            else None,
            "token_fraction": round(total_tokens / budget.max_tokens, 4)
            if budget.max_tokens
            else None,
        }
    return {"run": run, "phases": phases, "tasks": tasks, "budget": used}
