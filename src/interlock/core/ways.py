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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from interlock.core.flow_bound import flow_bound
from interlock.core.workflow import Pipeline

Visits = tuple[tuple[str, int], ...]  # (phase, visits), sorted
# More runs than this of the states weighed one by one (`Ways.dearest` over loops back), or
# a search that widened states: the quote is the flow bound instead (`core.flow_bound`).
MAX_PAIRS = 5_000
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ROLE = re.compile(r"\brole='[^']*'")  # a worker's own name, which is no read of a value
# Names through which a condition can read every role's values or every visit count.
_WHOLE = frozenset({"roles", "visits"})


@dataclass(frozen=True)
class Forgetting:
    """For each phase, what of the history a run there can still read.

    `live`: the roles whose values it or a phase it can reach may read before they are written
    again (a superset: every identifier in their definitions); a phase (but a fan-out that
    tolerates failed items) writes its workers' values before its rules read them, so the rules'
    reads of its own roles never reach further back. `edges`: where each phase's rules can send
    a run, with the rule's `max_visits`, and the phase after it. A run's visit counts matter
    only for the phases it can still come to (`again`), whose counts the rules' `max_visits`
    read; the counts of the others are only the way taken. A pipeline without loops keeps no
    visit count at all, so a chain of n optional phases has n positions, not 2**n histories;
    with loops, a loop left behind, or one whose bound is used up, forgets its counts.

    When every rule that goes back has a `max_visits` (every loop is bounded), a count is only
    ever compared with the bounds of the rules that go to its phase, up to the largest of
    them (`caps`), and a run with lower counts can do all that one with higher
    counts can (a rule its bound shuts is taken as a condition that does not hold, which is
    explored too), so the search keeps only the run with the lowest counts (`dominates`).
    A rule without a condition (`exact`) is taken whenever its bound lets it: the counts of
    its target must be equal for one run to stand for another."""

    live: dict[str, frozenset[str]]
    edges: dict[str, tuple[tuple[str, int | None], ...]] = field(default_factory=dict)
    loops: bool = False  # some phase can be visited twice
    # Phase -> the largest max_visits of the rules that go to it (counts above it read alike).
    caps: dict[str, int] = field(default_factory=dict)
    exact: frozenset[str] = frozenset()  # targets of bounded rules without a condition
    bounded: dict[str, tuple[str, ...]] = field(default_factory=dict)  # phase -> its targets
    dominates: bool = False  # every loop is bounded: lower counts stand for higher ones

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

    def counts(self, phase: str, visits: Mapping[str, int]) -> Visits:
        """The visit counts a run at `phase` can still read. Whole, not up to the caps: a
        state must never share a key with one that follows it after more visits, or a way
        would go round for ever in `Ways`."""
        again = self.again(phase, visits)
        return tuple(sorted((p, n) for p, n in visits.items() if p in again))

    def read_counts(self, phase: str, visits: Mapping[str, int]) -> dict[str, int]:
        """The counts (each up to its cap) that the bounds of rules a run at `phase` can
        still come to read: what decides which of those rules its bounds shut."""
        caps, bounded = self.caps, self.bounded
        places = self.again(phase, visits) | {phase}
        targets = {t for p in places for t in bounded[p]}
        return {t: min(visits.get(t, 0), caps[t]) for t in targets}

    def offset(self, kept: Mapping[str, int], new: Mapping[str, int]) -> Visits | None:
        """How many visits more the run of `read_counts` `new` has made than a run at the
        same position with visit counts `kept`, on each phase, when the `kept` one can do
        all that the `new` one can (None when it cannot: some count of `kept` is higher, or
        differs at a rule without a condition)."""
        more = []
        caps = self.caps
        for phase, count in new.items():
            other = min(kept.get(phase, 0), caps[phase])
            if other > count or (other != count and phase in self.exact):
                return None
            if other < count:
                more.append((phase, count - other))
        return tuple(sorted(more))

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
        before: dict[str, set[str]] = {}  # read when the phase starts its tasks
        after: dict[str, set[str]] = {}  # read by its rules, once its tasks are done
        kills: dict[str, frozenset[str]] = {}  # the roles it always writes before `after`
        caps: dict[str, int] = {}
        exact: set[str] = set()
        dominates = True
        for n, phase in enumerate(pipeline.phases):
            if any(rule.goto not in index for rule in phase.next):
                return None
            successors[phase.id] = [index[rule.goto] for rule in phase.next]
            edges[phase.id] = tuple((rule.goto, rule.max_visits) for rule in phase.next)
            for rule in phase.next:
                if rule.max_visits is None:
                    # A way back with no bound: counts can grow until the visit limit says so.
                    dominates = dominates and index[rule.goto] > n
                    continue
                caps[rule.goto] = max(caps.get(rule.goto, 0), rule.max_visits)
                if rule.if_ is None:
                    exact.add(rule.goto)
            if n + 1 < len(ids):
                successors[phase.id].append(n + 1)
                edges[phase.id] += ((ids[n + 1], None),)
            bare = phase.model_copy(update={"next": []})
            before[phase.id] = set(_NAME.findall(_ROLE.sub("", repr(bare))))
            after[phase.id] = set(_NAME.findall(" ".join(r.if_ or "" for r in phase.next)))
            after[phase.id] |= {r.goto for r in phase.next}  # as before: a name is a name
            if (before[phase.id] | after[phase.id]) & _WHOLE:
                return None
            own = frozenset(w.role for w in phase.workers)
            # Every lane of a fan-out that tolerates no failure completes before its rules
            # run (its list has an item at least: `max_items` is 1 or more).
            fans = phase.for_each
            kills[phase.id] = own if fans is None or fans.tolerate is None else frozenset()
        # What each phase can reach (a bit per phase), and the names read from there on before
        # a phase writes them: one pass from the last phase settles a pipeline without loops;
        # loops take a few.
        reach = dict.fromkeys(ids, 0)
        reads = {phase: frozenset(before[phase] | (after[phase] - kills[phase])) for phase in ids}
        changed = True
        while changed:
            changed = False
            for at in reversed(ids):
                bits, seen = reach[at], set(reads[at])
                for successor in successors[at]:
                    bits |= (1 << successor) | reach[ids[successor]]
                    seen |= reads[ids[successor]] - kills[at]
                if bits != reach[at] or len(seen) != len(reads[at]):
                    reach[at], reads[at] = bits, frozenset(seen)
                    changed = True
        live = {
            phase.id: reads[phase.id] | ({w.role for w in phase.workers} - kills[phase.id])
            for phase in pipeline.phases
        }
        loops = any(reach[at] >> n & 1 for n, at in enumerate(ids))
        bounded = {
            p.id: tuple(r.goto for r in p.next if r.max_visits is not None) for p in pipeline.phases
        }
        return cls(live, edges, loops, caps, frozenset(exact), bounded, dominates and loops)


Guards = tuple[tuple[str, int], ...]  # (phase, n): a bounded rule went there, n visits below it


@dataclass
class Ways:
    """The steps a search took between the states it kept, each with the visits it added.

    State 0 is the new run. Visits only grow along a step, so the dearest way is a longest
    path, found by relaxing the steps until nothing improves (zero-cost cycles end it).

    A state the search did not keep because a kept one with fewer visits of some phases can
    do all it can (`Forgetting.dominates`) is stood for by that one, by a step with an
    `offset`: the visits more it has made. Its ways are those of the kept state that take no
    bounded rule its own counts shut: each step keeps `guards`, how many visits below its
    bound each bounded rule it took was, and a way on which the offsets reach a guard is not
    one the state can take.
    """

    steps: list[list[tuple[int, Visits, Guards, Visits]]] = field(default_factory=lambda: [[]])
    caps: dict[str, int] = field(default_factory=dict)  # offsets are kept up to these
    offsets: bool = False  # some step has one
    # Per state, where it is and its visit counts (None: no offset reaches it), and what they
    # are read by: with an offset, the counts a bound can still read from there are fewer,
    # and an offset on another phase changes none of its ways.
    places: list[tuple[str, Mapping[str, int]] | None] = field(default_factory=lambda: [None])
    forgetting: Forgetting | None = None
    # Some state stands for runs of different visit counts, with the lowest of each (the
    # explorer widened it): its ways are more than any of those runs can take.
    widened: bool = False
    # `dearest` gave the flow bound: more than `MAX_PAIRS` runs to weigh, or widened states.
    bounded: bool = False

    @property
    def exact(self) -> bool:
        """Whether `dearest` gave the dearest way a run takes, not only a bound on it (known
        once `dearest` has run)."""
        return not (self.widened or self.bounded)

    def add_state(self, place: tuple[str, Mapping[str, int]] | None = None) -> int:
        self.steps.append([])
        self.places.append(place)
        return len(self.steps) - 1

    def add_step(
        self, parent: int, child: int, added: Visits, guards: Guards = (), offset: Visits = ()
    ) -> None:
        self.steps[parent].append((child, added, guards, offset))
        self.offsets = self.offsets or bool(offset)

    def dearest(self, per_visit: Mapping[str, float | int | None]) -> tuple[float | None, Visits]:
        """The largest total of `per_visit` over a way from the new run, and that way's visits
        (None: a reachable phase has no bound); equal totals: the way of more visits."""
        if self.offsets and not self.widened:
            weighed = self._dearest_offset(per_visit)
            if weighed is not None:
                return weighed
        if self.offsets or self.widened:
            # Too many runs to weigh, or states that stand for runs of other counts (whose
            # ways are more than theirs): a bound from the rules alone.
            self.bounded = True
            assert self.forgetting is not None
            reached = {p for steps in self.steps for _, added, _, _ in steps for p, _ in added}
            return flow_bound(self.forgetting.edges, per_visit, reached)
        best: dict[int, tuple[float, int]] = {0: (0.0, 0)}
        came: dict[int, tuple[int, Visits]] = {}
        changed = True
        while changed:
            changed = False
            for parent, steps in enumerate(self.steps):
                if parent not in best:
                    continue
                total, length = best[parent]
                for child, added, _, _ in steps:
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

    def _dearest_offset(
        self, per_visit: Mapping[str, float | int | None]
    ) -> tuple[float | None, Visits] | None:
        """`dearest` over (state, offset) pairs: each is a run the search saw, its counts
        those of the state plus the offset; a step whose guards the offset reaches is not
        taken. The pairs a way can reach are listed first, then relaxed in the order a
        depth-first walk finishes them, reversed (a topological order, but for cycles that
        add no visit), until nothing improves: usually one pass. None when there are more
        than `MAX_PAIRS` pairs."""
        Pair = tuple[int, Visits]
        start: Pair = (0, ())
        edges: dict[Pair, list[tuple[Pair, Visits]]] = {}
        todo = [start]
        while todo:
            key = todo.pop()
            if key in edges:
                continue
            edges[key] = out = []
            if len(edges) > MAX_PAIRS:
                return None
            node, offset = key
            more = dict(offset)
            for child, added, guards, link in self.steps[node]:
                if any(more.get(phase, 0) >= below for phase, below in guards):
                    continue
                after = offset
                if link:
                    summed = dict(more)
                    for phase, count in link:
                        summed[phase] = min(summed.get(phase, 0) + count, self.caps[phase])
                    after = tuple(sorted(summed.items()))
                target = (child, self._read(child, after) if after else after)
                out.append((target, added))
                if target not in edges:
                    todo.append(target)
        order: list[Pair] = []
        done: set[Pair] = set()
        stack: list[tuple[Pair, int]] = [(start, 0)]
        while stack:
            key, at = stack.pop()
            if at == 0:
                if key in done:
                    continue
                done.add(key)
            out = edges[key]
            while at < len(out) and out[at][0] in done:
                at += 1
            if at < len(out):
                stack += [(key, at + 1), (out[at][0], 0)]
            else:
                order.append(key)
        order.reverse()
        best: dict[Pair, tuple[float, int]] = {start: (0.0, 0)}
        came: dict[Pair, tuple[Pair, Visits]] = {}
        changed = True
        while changed:
            changed = False
            for key in order:
                if key not in best:
                    continue
                total, length = best[key]
                for target, added in edges[key]:
                    gain = 0.0
                    for phase, count in added:
                        cost = per_visit.get(phase, 0)
                        if cost is None:
                            return None, self._visits(came, key, added)
                        gain += count * cost
                    mine = (total + gain, length + sum(count for _, count in added))
                    if target not in best or mine > best[target]:
                        best[target], came[target] = mine, (key, added)
                        changed = True
        end = max(sorted(best), key=lambda n: best[n])
        return best[end][0], self._visits(came, end, ())

    def _read(self, node: int, offset: Visits) -> Visits:
        """The part of `offset` that the bounds ahead of a run at `node` with it can read,
        each up to what shuts every rule to its phase."""
        place, forgetting = self.places[node], self.forgetting
        if place is None or forgetting is None:
            return ()
        phase, visits = place
        reads = forgetting.read_counts(phase, _Plus(visits, dict(offset)))
        caps = self.caps
        kept = ((p, min(n, caps[p] - visits.get(p, 0))) for p, n in offset if p in reads)
        return tuple((p, n) for p, n in kept if n > 0)

    @staticmethod
    def _visits(came: Mapping[Any, tuple[Any, Visits]], node: Any, last: Visits) -> Visits:
        counts: dict[str, int] = {}
        for phase, count in last:
            counts[phase] = counts.get(phase, 0) + count
        while node in came:
            node, added = came[node]
            for phase, count in added:
                counts[phase] = counts.get(phase, 0) + count
        return tuple(sorted(counts.items()))


class _Plus(Mapping[str, int]):
    """Visit counts with some visits more (`Ways`)."""

    def __init__(self, visits: Mapping[str, int], more: Mapping[str, int]) -> None:
        self.visits, self.more = visits, more

    def __getitem__(self, key: str) -> int:
        return self.visits.get(key, 0) + self.more.get(key, 0)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.visits or key in self.more:
            return self[key]
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(set(self.visits) | set(self.more))

    def __len__(self) -> int:
        return len(set(self.visits) | set(self.more))
