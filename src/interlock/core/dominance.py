"""Which phases every way through a pipeline passes: dominance in the graph of transitions.

A phase may count on a file only when the phase that writes it runs on every way the run can
reach the reader. Otherwise a run that takes the other branch fails at the reader, after paying
for everything before it. "Runs on every way from the first phase to B" is "dominates B", and
the dominator tree answers it for every pair at once. It is built with the iterative algorithm
of Cooper, Harvey and Kennedy ("A Simple, Fast Dominance Algorithm", 2001): a few passes in
reverse postorder, no recursion, so pipelines of thousands of phases cost milliseconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


class Dominance:
    """Dominance among nodes `0..n-1` of a graph entered at node 0.

    Args:
        successors: for each node, the nodes it may go to (duplicates and self-edges allowed).
    """

    def __init__(self, successors: Sequence[Sequence[int]]) -> None:
        self._successors = successors
        order = _reverse_postorder(successors)
        self._rank = {node: rank for rank, node in enumerate(order)}
        self._idom = _immediate_dominators(successors, order, self._rank)
        self._enter, self._exit = _tree_intervals(len(successors), self._idom)

    def reachable(self, node: int) -> bool:
        """Whether any way from node 0 reaches `node`."""
        return node in self._rank

    def dominates(self, first: int, second: int) -> bool:
        """Whether every way from node 0 to `second` passes through `first` (a node dominates
        itself; nothing dominates an unreachable node, which no way reaches)."""
        if not (self.reachable(first) and self.reachable(second)):
            return False
        enter, exit_ = self._enter, self._exit
        return enter[first] <= enter[second] and exit_[second] <= exit_[first]

    def way_around(self, avoid: int, target: int) -> list[int]:
        """A shortest way from node 0 to `target` that never enters `avoid` (empty if none)."""
        if avoid == 0 or not self.reachable(target):
            return []
        came_from: dict[int, int] = {0: 0}
        queue = deque([0])
        while queue:
            node = queue.popleft()
            if node == target:
                way = [node]
                while node != 0:
                    node = came_from[node]
                    way.append(node)
                return way[::-1]
            for succ in self._successors[node]:
                if succ != avoid and succ not in came_from:
                    came_from[succ] = node
                    queue.append(succ)
        return []


def _reverse_postorder(successors: Sequence[Sequence[int]]) -> list[int]:
    """The nodes reachable from 0, each after all its predecessors except along back edges."""
    seen = {0}
    postorder: list[int] = []
    stack = [(0, iter(successors[0]))]
    while stack:
        node, pending = stack[-1]
        succ = next(pending, None)
        if succ is None:
            postorder.append(node)
            stack.pop()
        elif succ not in seen:
            seen.add(succ)
            stack.append((succ, iter(successors[succ])))
    return postorder[::-1]


def _immediate_dominators(
    successors: Sequence[Sequence[int]], order: list[int], rank: dict[int, int]
) -> list[int | None]:
    predecessors: list[list[int]] = [[] for _ in successors]
    for node in order:
        for succ in successors[node]:
            predecessors[succ].append(node)
    idom: list[int | None] = [None] * len(successors)
    idom[0] = 0

    def meet(first: int, second: int) -> int:
        while first != second:
            while rank[first] > rank[second]:
                first = idom[first]  # type: ignore[assignment]  # set: processed earlier
            while rank[second] > rank[first]:
                second = idom[second]  # type: ignore[assignment]
        return first

    changed = True
    while changed:
        changed = False
        for node in order[1:]:
            new: int | None = None
            for pred in predecessors[node]:
                if idom[pred] is not None:
                    new = pred if new is None else meet(pred, new)
            if new != idom[node]:
                idom[node] = new
                changed = True
    return idom


def _tree_intervals(size: int, idom: list[int | None]) -> tuple[list[int], list[int]]:
    """Entry and exit times of a walk of the dominator tree: `a` is an ancestor of `b` exactly
    when a's interval holds b's, so each dominance question costs two comparisons."""
    children: list[list[int]] = [[] for _ in range(size)]
    for node, parent in enumerate(idom):
        if parent is not None and node != 0:
            children[parent].append(node)
    enter, exit_ = [0] * size, [0] * size
    clock = 0
    stack = [(0, iter(children[0]))]
    enter[0] = clock
    while stack:
        node, pending = stack[-1]
        child = next(pending, None)
        clock += 1
        if child is None:
            exit_[node] = clock
            stack.pop()
        else:
            enter[child] = clock
            stack.append((child, iter(children[child])))
    return enter, exit_
