"""What of a run's history its future can still read, and the ways a search went.

Two states of a pipeline without loops that differ only in phases passed over or values no
later phase reads have the same future: a chain of n optional phases has 2**n histories but n
positions. `Forgetting` says what to keep in a state's key; `Ways` keeps the steps between the
states so kept, each with the visits it added, so the dearest way through the pipeline is still
found exactly (a longest path over the steps) although each state is explored once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from interlock.core.workflow import Pipeline

Visits = tuple[tuple[str, int], ...]  # (phase, visits), sorted
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ROLE = re.compile(r"\brole='[^']*'")  # a worker's own name, which is no read of a value
# Names through which a condition can read every role's values or every visit count.
_WHOLE = frozenset({"roles", "visits"})


@dataclass(frozen=True)
class Forgetting:
    """For each phase, the roles whose values it or a phase after it may read, among those
    written before it and its own (a superset: every identifier in their definitions). Only
    for pipelines whose phases never come back, so a phase passed over is never visited."""

    live: dict[str, frozenset[str]]

    @classmethod
    def of(cls, pipeline: Pipeline) -> Forgetting | None:
        """None when a phase can be visited twice, or something reads all values at once:
        then the whole history is kept."""
        index = {p.id: n for n, p in enumerate(pipeline.phases)}
        if len(index) < len(pipeline.phases):
            return None
        successors: dict[str, list[str]] = {}
        for n, phase in enumerate(pipeline.phases):
            if any(rule.goto not in index or index[rule.goto] <= n for rule in phase.next):
                return None  # a way back (or an unknown phase): visit counts matter
            successors[phase.id] = [rule.goto for rule in phase.next]
            if n + 1 < len(pipeline.phases):
                successors[phase.id].append(pipeline.phases[n + 1].id)
        reads: dict[str, frozenset[str]] = {}
        for phase in reversed(pipeline.phases):  # every way goes forward: later ones are done
            names = set(_NAME.findall(_ROLE.sub("", repr(phase))))
            if names & _WHOLE:
                return None
            for successor in successors[phase.id]:
                names |= reads[successor]
            reads[phase.id] = frozenset(names)
        live: dict[str, frozenset[str]] = {}
        before: set[str] = set()
        for phase in pipeline.phases:
            own = {w.role for w in phase.workers}
            live[phase.id] = frozenset((reads[phase.id] & before) | own)
            before |= own
        return cls(live)


@dataclass
class Ways:
    """The steps a search took between the states it kept, each with the visits it added.

    State 0 is the new run. Visits only grow along a step, so the dearest way is a longest
    path, found by relaxing the steps until nothing improves (zero-cost cycles end it).
    """

    steps: list[list[tuple[int, Visits]]] = field(default_factory=lambda: [[]])

    def add_state(self) -> int:
        self.steps.append([])
        return len(self.steps) - 1

    def add_step(self, parent: int, child: int, added: Visits) -> None:
        self.steps[parent].append((child, added))

    def dearest(self, per_visit: Mapping[str, float | int | None]) -> tuple[float | None, Visits]:
        """The largest total of `per_visit` over a way from the new run, and that way's visits
        (None: a reachable phase has no bound); equal totals: the way of more visits."""
        best: dict[int, tuple[float, int]] = {0: (0.0, 0)}
        came: dict[int, tuple[int, Visits]] = {}
        changed = True
        while changed:
            changed = False
            for parent, steps in enumerate(self.steps):
                if parent not in best:
                    continue
                total, length = best[parent]
                for child, added in steps:
                    gain = 0.0
                    for phase, count in added:
                        cost = per_visit.get(phase, 0)
                        if cost is None:
                            return None, self._visits(came, parent, added)
                        gain += count * cost
                    mine = (total + gain, length + sum(count for _, count in added))
                    if child not in best or mine > best[child]:
                        best[child], came[child] = mine, (parent, added)
                        changed = True
        end = max(sorted(best), key=lambda n: best[n])
        return best[end][0], self._visits(came, end, ())

    @staticmethod
    def _visits(came: dict[int, tuple[int, Visits]], node: int, last: Visits) -> Visits:
        counts: dict[str, int] = {}
        for phase, count in last:
            counts[phase] = counts.get(phase, 0) + count
        while node in came:
            node, added = came[node]
            for phase, count in added:
                counts[phase] = counts.get(phase, 0) + count
        return tuple(sorted(counts.items()))
