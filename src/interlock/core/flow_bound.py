"""A bound on the dearest way through a pipeline whose loops back are all bounded, from its
rules alone: the most a flow of visits through the phases can cost.

Every run is a flow: one unit enters the first phase, each visit of a phase leaves it by one
of its rules (or its next phase, or by ending), and a rule that goes back to phase `t` is
taken only while `t` has fewer visits than its `max_visits`, so all the rules back to `t`
together are taken at most the largest of their bounds, one fewer when every way to a phase
they leave from passes `t` first (then `t` was visited before). The flow of the most cost
under those limits is at least the cost of every run: an upper bound, found exactly by
cancelling cycles of gain in the residual graph (Bellman-Ford), over a graph of a few nodes
per phase. The quote falls back to it where weighing the ways one by one would cost too much
(`interlock.core.ways`); it is not always the least bound (it does not see that a phase a run
skipped has fewer visits to go back to, say).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from interlock.core.dominance import Dominance

Visits = tuple[tuple[str, int], ...]
# Phase -> where its rules can send a run, each with its max_visits, and its next phase
# (`Forgetting.edges`), in the pipeline's order.
Edges = Mapping[str, tuple[tuple[str, int | None], ...]]
_EPSILON = 1e-9


class _Graph:
    """A residual graph: edge `e` and its reverse `e ^ 1`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.head: list[int] = []
        self.tail: list[int] = []
        self.room: list[int] = []
        self.gain: list[float] = []

    def edge(self, tail: int, head: int, room: int, gain: float) -> int:
        self.tail += [tail, head]
        self.head += [head, tail]
        self.room += [room, 0]
        self.gain += [gain, -gain]
        return len(self.head) - 2

    def flow(self, edge: int) -> int:
        return self.room[edge ^ 1]

    def cancel_cycles(self) -> None:
        """Push flow round every cycle of positive gain until none is left."""
        while (cycle := self._gaining_cycle()) is not None:
            push = min(self.room[e] for e in cycle)
            for e in cycle:
                self.room[e] -= push
                self.room[e ^ 1] += push

    def _gaining_cycle(self) -> list[int] | None:
        """Edges of a cycle of positive gain with room on each (None: there is none)."""
        best = [0.0] * self.size
        came = [-1] * self.size
        last = -1
        for _ in range(self.size):
            last = -1
            for e, room in enumerate(self.room):
                if room > 0 and best[self.tail[e]] + self.gain[e] > best[self.head[e]] + _EPSILON:
                    best[self.head[e]] = best[self.tail[e]] + self.gain[e]
                    came[self.head[e]] = e
                    last = self.head[e]
            if last < 0:
                return None
        node = last
        for _ in range(self.size):  # walk back onto the cycle itself
            node = self.tail[came[node]]
        cycle, at = [], node
        while True:
            e = came[at]
            cycle.append(e)
            at = self.tail[e]
            if at == node:
                return cycle


def flow_bound(
    edges: Edges, per_visit: Mapping[str, float | int | None], reached: Collection[str]
) -> tuple[float | None, Visits]:
    """The most a flow of visits through the phases in `reached` can cost, and its visits
    (None: a phase reached has no bound on its cost, with one visit of it)."""
    ids = list(edges)
    for phase in ids:
        if phase in reached and per_visit.get(phase, 0) is None:
            return None, ((phase, 1),)
    if not reached:
        return 0.0, ()
    index = {phase: n for n, phase in enumerate(ids)}
    cost = {p: float(per_visit.get(p, 0) or 0) for p in ids}
    many = 1 + sum(bound or 0 for out in edges.values() for _, bound in out)
    # Nodes: each phase, then the way back into each phase, a source and a sink.
    count = len(ids)
    source, sink = 2 * count, 2 * count + 1
    graph = _Graph(2 * count + 2)
    order = Dominance([[index[t] for t, _ in edges[p]] for p in ids])
    into: dict[int, list[int]] = {0: [graph.edge(source, 0, 1, cost[ids[0]])]}
    graph.edge(sink, source, 1, 0.0)
    back: dict[int, tuple[int, bool]] = {}  # phase -> (largest bound back to it, dominated)
    for at, phase in enumerate(ids):
        if phase not in reached:
            continue
        graph.edge(at, sink, 1, 0.0)
        for goto, bound in edges[phase]:
            target = index[goto]
            if goto not in reached:
                continue
            if target > at:
                into.setdefault(target, []).append(graph.edge(at, target, many, cost[goto]))
                continue
            assert bound is not None, "every rule back has max_visits (`Forgetting.dominates`)"
            largest, dominated = back.get(target, (0, True))
            back[target] = (max(largest, bound), dominated and order.dominates(target, at))
            graph.edge(at, count + target, many, 0.0)
    for target, (largest, dominated) in back.items():
        room = largest - 1 if dominated else largest
        if room > 0:
            into.setdefault(target, []).append(
                graph.edge(count + target, target, room, cost[ids[target]])
            )
    graph.cancel_cycles()
    visits = {ids[t]: sum(graph.flow(e) for e in found) for t, found in into.items()}
    total = sum(n * cost[phase] for phase, n in visits.items())
    return total, tuple(sorted((p, n) for p, n in visits.items() if n))
