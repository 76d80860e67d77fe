"""The simulator's child runs: a parent running a sub-pipeline, stepped in one deterministic
loop with its children, under crashes around the children, cancelled children and budgets."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from interlock.core import state as st
from interlock.sim import simulate
from interlock.sim.child_mix import MixedChildSimulation
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


def test_a_crash_drawn_while_a_child_runs_kills_the_orchestrator_before_it_acts_again() -> None:
    """Seed 60,008,419 once let the dead orchestrator drive the child on for one more step
    (the child failed under it, and the simulation ended with the parent never told): the
    crash now happens inside the step, and the new orchestrator records the child's end."""
    result = simulate(60_008_419, pipeline="children")
    assert result.violations == []
    assert result.status == "failed" and result.faults["crash_child_running"] >= 1


def test_the_child_checks_have_teeth(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a child's final spend added to its running total instead of replacing it (the
    spend counted twice), the simulator finds violations within 60 seeds."""

    def charge_twice(
        state: st.RunState, task: st.TaskState, attempt: int, usage: dict[str, Any]
    ) -> None:
        tokens = int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
        st._add(state, task, float(usage.get("cost_usd", 0.0)), tokens)
        task.charged.add(attempt)

    monkeypatch.setattr(st, "_charge", charge_twice)
    broken = [s for s in range(60) if simulate(s, pipeline="children").violations]
    assert len(broken) >= 10, broken


def test_sub_pipelines_among_signals_fan_out_reviews_and_reruns_keep_every_invariant() -> None:
    """Over 30 seeds of a parent that fans its child runs out over a list, waits for a signal
    or a delay around them, is reviewed and rerun, every feature occurs and no invariant of
    parent or child breaks."""
    kinds: Counter[str] = Counter()
    shapes: Counter[str] = Counter()
    failures = []
    for seed in range(30):
        sim = MixedChildSimulation(32_000_000 + seed)
        result = sim.run()
        shapes.update(result.pipeline.split("-")[2:])
        if result.violations:
            failures.append(f"seed {result.seed}: {result.violations[:2]}")
        kinds.update(e.kind for e in sim.store.all_events(0, 100_000))
    assert failures == [], failures[:5]
    assert shapes["fanout"] and shapes["paused"] and shapes["budget"], shapes
    for kind in (
        "signal_received",
        "wait_ended",
        "output_edited",
        "rejected",
        "task_reused",
        "child_spent",
    ):
        assert kinds[kind], (kind, kinds)
