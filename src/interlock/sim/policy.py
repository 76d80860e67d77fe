"""Invariants of the workflow's policies (budget, pause_after) and of the folded state.

Kept apart from the transition checks of `invariants`, and independent of the engine: every
count here is kept from the events themselves, so a fold that miscounts (the event counter,
visits, a phase's status, a waived budget) shows up as a difference instead of being shared
by the checker (`sim.shadow` compares them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from interlock.core import events as ev
from interlock.core.workflow import Pipeline

# What the engine decides only while a run may go on spending: once over a budget that was
# not waived, none of these may be recorded before the budget's pause (or failure).
SPENDING = (ev.TaskDispatched, ev.PhaseStarted, ev.PhaseCompleted, ev.BranchTaken, ev.Delivered)


@dataclass
class PolicyChecker:
    """Feeds on stored events like `HistoryChecker`; `problem` says what one broke."""

    pipeline: Pipeline
    events: int = 0
    tokens: int = 0
    cost: float = 0.0
    paused_for: str | None = None  # the reason of the pause in force, if any
    waived: bool = False  # an approved budget pause lets the run spend on
    owed: tuple[str, int] | None = None  # a completed pause_after phase not yet approved
    approvals: int = 0
    visits: dict[str, int] = field(default_factory=dict)
    phase_status: dict[str, str] = field(default_factory=dict)
    current: tuple[str, bool] | None = None  # (phase, completed)
    # A running child's spend counted so far, by (task, attempt), until its final usage.
    running: dict[tuple[str, int], int] = field(default_factory=dict)
    settled: set[tuple[str, int]] = field(default_factory=set)

    def problem(self, event: ev.Event) -> str | None:
        """Check one more stored event and fold it into the counts."""
        self.events += 1
        problem = self._budget(event) or self._pause_after(event)
        self._count(event)
        return problem

    def _over(self) -> bool:
        budget = self.pipeline.budget
        if budget is None or self.waived:
            return False
        return (budget.max_tokens is not None and self.tokens >= budget.max_tokens) or (
            budget.max_cost_usd is not None and self.cost >= budget.max_cost_usd
        )

    def _budget(self, event: ev.Event) -> str | None:
        if self.paused_for is not None and isinstance(event, SPENDING):
            return f"{event.kind} recorded while paused ({self.paused_for})"
        if self.paused_for is None and self._over() and isinstance(event, SPENDING):
            return f"{event.kind} recorded over budget ({self.tokens} tokens), not paused"
        late = self.paused_for is None and self._over()
        if late and isinstance(event, ev.Paused) and event.reason != "budget":
            return "paused for pause_after while over budget: the budget pause comes first"
        return None

    def _pause_after(self, event: ev.Event) -> str | None:
        if self.owed is None:
            return None
        leaving = isinstance(event, (ev.BranchTaken, ev.Delivered, ev.PhaseStarted))
        if leaving:
            phase, visit = self.owed
            return f"left phase {phase!r} visit {visit} without its pause_after approval"
        return None

    def _count(self, event: ev.Event) -> None:
        usage: Any = getattr(event, "usage", None)
        spending = (ev.TaskCompleted, ev.TaskFailed, ev.TaskTimedOut, ev.UsageRecorded)
        if isinstance(event, spending) and usage:
            attempt = (event.task_id, event.attempt)
            self.tokens -= self.running.pop(attempt, 0)  # the final spend replaces it
            self.settled.add(attempt)
            self.tokens += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
            self.cost += float(usage.get("cost_usd", 0.0))
        if isinstance(event, ev.ChildSpent):
            attempt = (event.task_id, event.attempt)
            if attempt not in self.settled:
                self.tokens += event.tokens - self.running.get(attempt, 0)
                self.running[attempt] = event.tokens
        if isinstance(event, ev.PhaseStarted):
            self.visits[event.phase] = event.visit
            self.phase_status[event.phase] = "running"
            self.current = (event.phase, False)
        elif isinstance(event, ev.PhaseCompleted):
            self.phase_status[event.phase] = "completed"
            self.current = (event.phase, True)
            if self.pipeline.phase(event.phase).pause_after:
                self.owed = (event.phase, event.visit)
        elif isinstance(event, ev.Paused):
            self.paused_for = event.reason
            # Nothing is spent while paused; approving a budget pause lets the run spend on.
            self.waived = self.waived or event.reason == "budget"
        elif isinstance(event, ev.Approved):
            self.approvals += 1
            if self.paused_for == "pause_after":
                self.owed = None
            self.paused_for = None
        elif isinstance(event, ev.Resumed):  # the child that paused the run went on
            self.paused_for = None
        elif isinstance(event, ev.Rejected):  # a person sent the paused run back
            self.paused_for, self.owed = None, None
        elif isinstance(event, (ev.RunFailed, ev.RunCancelled)):
            if self.current is not None and not self.current[1]:
                ended = "failed" if isinstance(event, ev.RunFailed) else "cancelled"
                self.phase_status[self.current[0]] = ended
            self.owed = None
