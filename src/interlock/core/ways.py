"""What of a run's history its future can still read, and the ways a search went.

Two states that differ only in phases passed over, loops left behind or values no later
phase reads have the same future: a chain of n optional phases has 2**n histories but n
positions, and a chain of n loops has n positions times the visits of the loop it is in.
`Forgetting` says what to keep in a state's key; `Ways` keeps the steps between the states so
kept, each with the visits it added, so the dearest way through the pipeline is still found
exactly (a longest path over the steps) although each state is explored once.
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
    """For each phase, what of the history a run there can still read.

    `live`: the roles whose values it or a phase it can reach may read (a superset: every
    identifier in their definitions), and its own. `edges`: where each phase's rules can
    send a run, with the rule's `max_visits`, and the phase after it. A run's visit counts
    matter only for the phases it can still come to (`again`), whose counts the rules'
    `max_visits` read; the counts of the others are only the way taken. A pipeline without
    loops keeps no visit count at all, so a chain of n optional phases has n positions, not
    2**n histories; with loops, a loop left behind, or one whose bound is used up, forgets
    its counts."""

    live: dict[str, frozenset[str]]
    edges: dict[str, tuple[tuple[str, int | None], ...]] = field(default_factory=dict)
    loops: bool = False  # some phase can be visited twice

    def again(self, phase: str, visits: Mapping[str, int]) -> set[str]:
        """The phases a run at `phase` with `visits` can still visit (in one step or more),
        by rules whose `max_visits` are not used up: visits only grow, so a rule used up
        never sends a run anywhere again."""
        found: set[str] = set()
        todo = [phase]
        while todo:
            for target, bound in self.edges[todo.pop()]:
                if target not in found and (bound is None or visits.get(target, 0) < bound):
                    found.add(target)
                    todo.append(target)
        return found

    @classmethod
    def of(cls, pipeline: Pipeline) -> Forgetting | None:
        """None when something reads all values or all visit counts at once (`roles`,
        `visits`), or a rule names an unknown phase: then the whole history is kept."""
        ids = [p.id for p in pipeline.phases]
        index = {phase: n for n, phase in enumerate(ids)}
        if len(index) < len(ids):
            return None
        successors: dict[str, list[int]] = {}
        edges: dict[str, tuple[tuple[str, int | None], ...]] = {}
        names: dict[str, set[str]] = {}
        for n, phase in enumerate(pipeline.phases):
            if any(rule.goto not in index for rule in phase.next):
                return None
            successors[phase.id] = [index[rule.goto] for rule in phase.next]
            edges[phase.id] = tuple((rule.goto, rule.max_visits) for rule in phase.next)
            if n + 1 < len(ids):
                successors[phase.id].append(n + 1)
                edges[phase.id] += ((ids[n + 1], None),)
            names[phase.id] = set(_NAME.findall(_ROLE.sub("", repr(phase))))
            if names[phase.id] & _WHOLE:
                return None
        # What each phase can reach (a bit per phase), and the names read from there on:
        # one pass from the last phase settles a pipeline without loops; loops take a few.
        reach = dict.fromkeys(ids, 0)
        reads = {phase: frozenset(names[phase]) for phase in ids}
        changed = True
        while changed:
            changed = False
            for at in reversed(ids):
                bits, seen = reach[at], set(reads[at])
                for successor in successors[at]:
                    bits |= (1 << successor) | reach[ids[successor]]
                    seen |= reads[ids[successor]]
                if bits != reach[at] or len(seen) != len(reads[at]):
                    reach[at], reads[at] = bits, frozenset(seen)
                    changed = True
        live = {
            phase.id: reads[phase.id] | {w.role for w in phase.workers} for phase in pipeline.phases
        }
        loops = any(reach[at] >> n & 1 for n, at in enumerate(ids))
        return cls(live, edges, loops)


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
