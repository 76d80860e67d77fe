"""The simulator's reviewers: edits and rejections at pauses, under faults and crashes."""

from __future__ import annotations

from collections import Counter

from interlock.sim.world import Simulation


def test_seeds_with_edits_and_rejections_keep_every_invariant() -> None:
    """Over 150 seeds, edits, rejections and the re-runs edits cause are recorded and no
    invariant breaks (review events only while paused, re-runs only after an edit, nothing
    stale delivered)."""
    recorded: Counter[str] = Counter()
    failures = []
    for seed in range(150):
        sim = Simulation(seed)
        result = sim.run()
        if result.violations:
            failures.append(f"seed {seed}: {result.violations[:2]}")
        for event in sim.store.all_events(0, 100_000):
            if event.kind in ("output_edited", "rejected") or event.rule == "revise":
                recorded[event.rule or event.kind] += 1
    assert failures == [], failures[:5]
    assert recorded["output_edited"] and recorded["rejected"] and recorded["revise"], recorded
