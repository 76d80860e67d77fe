"""A pipeline as a graph the dashboard draws: phases holding workers, `reads:` edges between
workers, `next:` edges between phases with their conditions, and the path a run took."""

from __future__ import annotations

from typing import Any

from interlock.core import events as ev
from interlock.core.workflow import Pipeline
from interlock.storage.base import StoredEvent

END = "end"  # the node after the final phase


def describe(pipeline: Pipeline) -> dict[str, Any]:
    """Nodes and edges of `pipeline`, in file order (the dashboard lays them out left to
    right in that order)."""
    writers = pipeline.writers
    phases: list[dict[str, Any]] = []
    reads: list[dict[str, str]] = []
    flow: list[dict[str, Any]] = []
    last = len(pipeline.phases) - 1
    for index, phase in enumerate(pipeline.phases):
        phases.append(
            {
                "id": phase.id,
                "mode": phase.mode,
                "pause_after": phase.pause_after,
                "for_each": phase.for_each.items if phase.for_each else None,
                "wait_for": phase.wait_for.signal if phase.wait_for else None,
                "wait_when": phase.wait_for.when if phase.wait_for else None,
                "delay": phase.delay is not None or phase.not_before is not None,
                "workers": [
                    {
                        "role": w.role,
                        "kind": w.kind,
                        "model": w.model,
                        "output": w.output_name,
                        "final": w.final,
                        "pipeline": w.child_name if w.pipeline else None,  # a child run's
                    }
                    for w in phase.workers
                ],
            }
        )
        for worker in phase.workers:
            for name in worker.reads:
                if name in writers:
                    reads.append({"from": writers[name], "to": worker.role, "file": name})
        if index == last:
            # The last phase delivers once it completes: its `next:` rules never apply.
            flow.append({"from": phase.id, "to": END, "rule": None, "condition": None})
            continue
        for number, rule in enumerate(phase.next, start=1):
            flow.append(
                {
                    "from": phase.id,
                    "to": rule.goto,
                    "rule": number,
                    "condition": rule.if_,
                    "max_visits": rule.max_visits,
                }
            )
        if not any(r.if_ is None and r.max_visits is None for r in phase.next):
            # No rule that always applies: when none does, the run goes on in file order.
            after = pipeline.phases[index + 1].id
            flow.append({"from": phase.id, "to": after, "rule": None, "condition": None})
    return {"phases": phases, "reads": reads, "flow": flow, "end": END}


def edge_key(source: str, target: str, rule: int | None) -> str:
    """How `taken` names an edge of `flow` (see `path_taken`); graph.js builds the same."""
    return f"{source}->{target}" if rule is None else f"{source}->{target}#{rule}"


def path_taken(events: list[StoredEvent]) -> dict[str, Any]:
    """The phases a run visited in order, and how many times each `next:` edge was taken:
    keyed `from->to#N` for rule N, so that two rules between the same phases are counted
    apart (only the rule that held is credited), and `from->to` for going on in file order,
    delivering (`->end`) and a rejection."""
    folder = PathFold()
    folder.feed(events)
    return folder.path()


class PathFold:
    """The path a run took, folded one event at a time (see `path_taken`)."""

    def __init__(self) -> None:
        self.visits: list[dict[str, Any]] = []
        self.taken: dict[str, int] = {}

    def path(self) -> dict[str, Any]:
        """What is folded so far (copies: feeding more does not change them)."""
        return {"visits": [dict(v) for v in self.visits], "taken": dict(self.taken)}

    def feed(self, events: list[StoredEvent]) -> None:
        """Fold `events` (the next ones of the run's history, in order)."""
        visits, taken = self.visits, self.taken
        for stored in events:
            event = stored.event
            if isinstance(event, ev.PhaseStarted):
                visits.append({"phase": event.phase, "visit": event.visit})
            elif isinstance(event, ev.BranchTaken):
                key = edge_key(event.phase, event.goto, event.rule)
                taken[key] = taken.get(key, 0) + 1
            elif isinstance(event, ev.Delivered) and visits:
                key = f"{visits[-1]['phase']}->{END}"
                taken[key] = taken.get(key, 0) + 1
            elif isinstance(event, ev.Rejected) and visits:
                key = f"{visits[-1]['phase']}->{event.to}"
                taken[key] = taken.get(key, 0) + 1
