"""The simulator's child runs: a parent running a sub-pipeline, stepped in one deterministic
loop with its children, under crashes around the children, cancelled children and budgets."""

from __future__ import annotations

from collections import Counter

from interlock.sim import simulate
from interlock.sim.child_world import ChildSimulation


def test_child_run_faults_keep_every_invariant() -> None:
    """Over 200 seeds every child fault point fires (a crash while a child runs, while it is
    paused for approval, after it ended but before the parent recorded it, a cancelled child)
    and no invariant breaks: no child runs on after its end, one result per child attempt,
    each child's spend counted once in its parent."""
    fired: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    failures = []
    for seed in range(200):
        sim = ChildSimulation(30_000_000 + seed)
        result = sim.run()
        fired.update(result.faults)
        statuses[result.status] += 1
        if result.violations:
            failures.append(f"seed {result.seed}: {result.violations[:2]}")
        kinds.update(e.kind for e in sim.store.all_events(0, 100_000))
    assert failures == [], failures[:5]
    for point in (
        "crash_child_points:before_child_start",
        "crash_child_points:after_child_start",
        "crash_child_points:before_child_result",
        "crash_child_running",
        "crash_child_paused",
        "cancel_child",
    ):
        assert fired[point], (point, fired)
    assert statuses["delivered"] and statuses["failed"] and statuses["cancelled"], statuses
    for kind in ("child_spent", "child_updated", "usage_recorded", "paused", "resumed"):
        assert kinds[kind], (kind, kinds)


def test_a_child_seed_replays_step_for_step() -> None:
    """The same seed gives the same histories of parent and children (one digest), a
    different seed another."""
    first, again = (
        simulate(31_000_007, pipeline="children"),
        simulate(31_000_007, pipeline="children"),
    )
    other = simulate(31_000_008, pipeline="children")
    assert first.digest == again.digest and first.steps == again.steps
    assert first.digest != other.digest
    assert first.summary()["rerun"].endswith("--seed 31000007 --pipeline children")
