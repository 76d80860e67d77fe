"""Dominance answers "does every way from the first node to B pass through A" exactly."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.core.dominance import Dominance


def reaches_without(successors: list[list[int]], avoid: int, target: int) -> bool:
    """Brute force: whether node 0 reaches `target` with `avoid` taken out of the graph."""
    if avoid == 0:
        return False
    seen, stack = {0}, [0]
    while stack:
        for succ in successors[stack.pop()]:
            if succ != avoid and succ not in seen:
                seen.add(succ)
                stack.append(succ)
    return target in seen


graphs = st.integers(min_value=1, max_value=9).flatmap(
    lambda size: st.lists(
        st.lists(st.integers(min_value=0, max_value=size - 1), max_size=3),
        min_size=size,
        max_size=size,
    )
)


@settings(max_examples=400, deadline=None)
@given(graphs)
def test_dominance_matches_brute_force_on_any_graph(successors: list[list[int]]) -> None:
    """On arbitrary graphs (loops, self-edges, unreachable nodes, irreducible cycles) A
    dominates B exactly when B is reachable and removing A cuts every way to it; a way
    around A is returned exactly when one exists, and it avoids A."""
    dominance = Dominance(successors)
    reachable = {n for n in range(len(successors)) if dominance.reachable(n)}
    assert reachable == {0} | {
        n for n in range(len(successors)) if reaches_without(successors, -1, n)
    }
    for first in range(len(successors)):
        for second in range(len(successors)):
            expected = second in reachable and (
                first == second or not reaches_without(successors, first, second)
            )
            assert dominance.dominates(first, second) == expected, (first, second)
            way = dominance.way_around(first, second)
            if first != second and second in reachable and not expected:
                assert way[0] == 0 and way[-1] == second and first not in way
                assert all(b in successors[a] for a, b in pairwise(way))
            elif first != second:
                assert way == [], (first, second, way)


def test_a_long_chain_is_walked_without_recursion() -> None:
    """Thirty thousand phases in a row: each dominates every later one, none an earlier."""
    size = 30_000
    dominance = Dominance([[n + 1] for n in range(size - 1)] + [[]])
    assert dominance.dominates(0, size - 1)
    assert dominance.dominates(12_345, 29_999)
    assert not dominance.dominates(29_999, 12_345)
