"""The engine's own fold beside the oracle: compared with it, never used by it.

The world checks after every step that the live state equals the fold of the stored history
(a write that missed the ledger, a fold that depends on more than the events) and that what
the fold counts agrees with the counts the oracle kept from the events themselves. Only this
module imports the engine's state and expressions; the checks of `sim.invariants`,
`sim.oracle`, `sim.outcomes`, `sim.policy` and `sim.waits_check` never do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from interlock.core import events as ev
from interlock.core.decide import expression_context, failed_item_values
from interlock.core.state import RunState, apply
from interlock.sim.invariants import HistoryChecker
from interlock.sim.policy import PolicyChecker


@dataclass
class ShadowedChecker(HistoryChecker):
    """A `HistoryChecker` that also folds the history with the engine's `apply`."""

    shadow: RunState = field(default_factory=RunState)

    def feed(self, seq: int, event: ev.Event) -> None:
        """Check one more stored event, then fold it the engine's way."""
        super().feed(seq, event)
        apply(self.shadow, event)

    def state_problems(self, state: RunState) -> list[str]:
        """Where the engine's folded state disagrees with what the oracle counted."""
        return state_problems(self.policy, state) + self._failed_items(state)

    def _failed_items(self, state: RunState) -> list[str]:
        """The failed items conditions read are those the oracle accepted, visit by visit."""
        oracle = self.oracle
        expected = {
            phase: sorted(oracle.failed_items.get((phase, visit), set()))
            for phase, visit in oracle.visits.items()
            if (phase, visit) in oracle.items
        }
        read = failed_item_values(state, self.pipeline)
        seen = {phase: [e["index"] for e in read.get(phase, [])] for phase in expected}
        if seen != expected:
            return [f"conditions see failed items {seen}, the history says {expected}"]
        return []


def state_problems(policy: PolicyChecker, state: RunState) -> list[str]:
    """Where the folded state disagrees with the counts `policy` kept from the events."""
    problems = []
    if state.events != policy.events:
        problems.append(f"the state counts {state.events} events, the history has {policy.events}")
    if state.visits != policy.visits:
        problems.append(f"visits {state.visits} differ from the history's {policy.visits}")
    if state.phase_status != policy.phase_status:
        problems.append(
            f"phase statuses {state.phase_status} differ from the history's {policy.phase_status}"
        )
    if state.approvals != policy.approvals:
        problems.append(f"{state.approvals} approvals folded, {policy.approvals} recorded")
    if sum(t.tokens for t in state.tasks.values()) != state.tokens:
        problems.append(f"the tasks' tokens do not add up to the run's {state.tokens}")
    if state.tokens != policy.tokens:
        problems.append(f"{state.tokens} tokens folded, {policy.tokens} recorded")
    if policy.pipeline.budget is not None and state.budget_waived != policy.waived:
        problems.append(f"budget waived is {state.budget_waived}, the history says {policy.waived}")
    visits = expression_context(state, policy.pipeline)["visits"]
    expected = {p.id: policy.visits.get(p.id, 0) for p in policy.pipeline.phases}
    if visits != expected:
        problems.append(f"conditions see visits {visits}, the history says {expected}")
    return problems
