"""The deterministic simulator over thousands of seeds: every invariant after every step."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from interlock.core import observe
from interlock.sim import simulate
from interlock.sim.pipelines import CATALOG

SEEDS = int(os.environ.get("INTERLOCK_SIM_SEEDS", "4000"))
FIRST = int(os.environ.get("INTERLOCK_SIM_START", "0"))


def test_thousands_of_seeds_keep_every_invariant() -> None:
    """Seeds over every catalog pipeline and random ones, with faults on, break nothing."""
    failures = []
    statuses: Counter[str] = Counter()
    fired: Counter[str] = Counter()
    for seed in range(FIRST, FIRST + SEEDS):
        result = simulate(seed)
        statuses[result.status] += 1
        fired.update(result.faults)
        if result.violations:
            failures.append(
                f"seed {seed}: {result.violations[:3]} (rerun: {result.summary()['rerun']})"
            )
    print(f"{SEEDS} seeds: {dict(statuses)}; faults {dict(fired)}")
    assert failures == [], "\n".join(failures[:10])
    assert statuses["delivered"] and statuses["failed"] and statuses["paused"]
    assert all(fired[point] for point in ("crash", "commit_ambiguous", "commit_failed"))


@pytest.mark.parametrize("pipeline", [*CATALOG, "random"])
def test_each_pipeline_shape_survives_faults(pipeline: str) -> None:
    """Every catalog shape (parallel, sequential, retries, fallbacks, pause, loop, fan-out,
    budget) and random ones keep the invariants on their own seeds."""
    bad = [s for s in range(100) if not simulate(10_000_000 + s, pipeline=pipeline).ok]
    assert bad == [], f"rerun: python benchmarks/simulate.py --seed {bad[0]} --pipeline {pipeline}"


@pytest.mark.parametrize("pipeline", [*CATALOG, "random"])
def test_without_faults_every_run_is_delivered(pipeline: str) -> None:
    """With every fault point off, each pipeline shape delivers its result."""
    for seed in range(30):
        result = simulate(seed, pipeline=pipeline, faults=False)
        assert result.ok, result.summary()
        assert result.status == "delivered", result.summary()


@pytest.mark.parametrize(
    "seed",
    [
        # A worker's start and completion reached an orchestrator that died before recording
        # them; the completion arrived again at the next one, which recorded it without a start.
        2024377,
    ],
)
def test_seeds_that_once_broke_an_invariant(seed: int) -> None:
    result = simulate(seed)
    assert result.ok, result.summary()


def test_a_seed_reproduces_exactly() -> None:
    """Running a seed twice gives the same history, byte for byte, and the same faults."""
    for seed in (3, 207, 4242):
        first, second = simulate(seed), simulate(seed)
        assert first.summary() == second.summary()
        assert first.digest and first.digest == second.digest


def test_the_simulator_catches_a_broken_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """If stale and duplicate reports were accepted, the invariants would say so."""
    monkeypatch.setattr("interlock.runtime.driver.accept_result", lambda state, result: True)
    broken = [s for s in range(200) if not simulate(s).ok]
    assert broken, "a driver that records every report must break an invariant"
    assert observe.accept_result is not None
